"""`ray job submit` runs the training job on a Ray cluster, as docs/cluster.md tells.

A head is started with `ray start` from the project's virtual environment (a
cluster of its own: not the test session's in-process one from conftest.py), a
two-iteration job is submitted with `--working-dir .`, and it must succeed and
leave its last checkpoint in `train.output_dir`.

The head is fenced off from everything else on the machine:
- its own `--temp-dir`, so no other `ray.init()` here finds it through
  /tmp/ray/ray_current_cluster, and it finds no other cluster;
- its own ports, drawn below the ephemeral range (a port picked there and freed
  again is soon handed to one of Ray's own random binds) and above Ray's worker
  ports; the fixed defaults (6379, 8265, 10001, 52365) may belong to another cluster;
- it is stopped by killing the processes of its own session (and their
  descendants: the job driver runs in a session of its own), never with
  `ray stop`, which kills every Ray process on the machine whatever its cluster.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent  # pytest runs from .venv: its `ray` and `python` are there
RAY = VENV_BIN / "ray"
JOB_TIMEOUT_S = 360
START_TIMEOUT_S = 180


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))  # fails if the port is bound on any address
        except OSError:
            return False
    return True


def free_ports(n: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < n:
        port = random.randint(20000, 32000)  # Ray workers use 10002-19999; the ephemeral range starts at 32768
        if port not in ports and _bindable(port):
            ports.append(port)
    return ports


class LocalHead:
    """A Ray head started by `ray start`, and stopped by killing its own processes."""

    def __init__(self) -> None:
        self.temp_dir = tempfile.mkdtemp(prefix="rjs-", dir="/tmp")  # short: Ray's socket paths live under it
        self.gcs_port, self.dashboard_port, self.agent_port, self.client_port = free_ports(4)
        self.dashboard = f"http://127.0.0.1:{self.dashboard_port}"
        self.env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        # `ray start` in Ray 2.60 turns token authentication on when it finds a token (~/.ray/auth_token,
        # RAY_AUTH_TOKEN); this private head needs none.
        # The venv first on PATH, as after `source .venv/bin/activate`: a job's `python` is looked up
        # on the PATH the head was started with (else the system Python, without torch, runs it).
        self.env.update(RAY_AUTH_MODE="disabled", PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
        self.session: int | None = None

    def start(self) -> None:
        # Ray swaps 127.0.0.1 for the machine's address in the GCS and raylet; the dashboard stays on 127.0.0.1.
        command = [
            str(RAY),
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={self.gcs_port}",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={self.dashboard_port}",
            f"--dashboard-agent-listen-port={self.agent_port}",
            f"--ray-client-server-port={self.client_port}",
            "--num-cpus=8",
            "--disable-usage-stats",
            f"--temp-dir={self.temp_dir}",
        ]
        process = subprocess.Popen(
            command,
            env=self.env,
            cwd=REPO,
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.session = process.pid  # every process the head starts stays in this session
        out, _ = process.communicate(timeout=START_TIMEOUT_S)
        assert process.returncode == 0, f"ray start failed:\n{out[-4000:]}"
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:  # `ray start` returns before the dashboard (and its job API) answers, or even if it died
            try:
                with urllib.request.urlopen(f"{self.dashboard}/api/version", timeout=5):
                    return
            except urllib.error.HTTPError:
                return  # it answers (401: token authentication is on; `ray job submit` then says so)
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"the dashboard never answered on {self.dashboard}:\n{self.dashboard_log()}")
            time.sleep(1)

    def dashboard_log(self) -> str:
        logs = Path(self.temp_dir) / "session_latest" / "logs"
        return "\n".join(p.read_text(errors="replace")[-2000:] for p in sorted(logs.glob("dashboard.*")) if p.is_file())

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(RAY), *args], env=self.env, cwd=REPO, capture_output=True, text=True, timeout=timeout
        )

    def stop(self) -> None:
        """Terminate the head's processes, then kill what is left. Only processes of its
        session and their descendants: other Ray clusters on this machine are untouched."""
        import psutil

        if self.session is None:
            return
        found: dict[int, psutil.Process] = {}
        for process in psutil.process_iter():
            try:
                if os.getsid(process.pid) == self.session:
                    found[process.pid] = process
                    for child in process.children(recursive=True):
                        found[child.pid] = child
            except (OSError, psutil.Error):
                continue
        found.pop(os.getpid(), None)
        for process in found.values():
            try:
                process.send_signal(signal.SIGTERM)
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(list(found.values()), timeout=3)
        for process in alive:
            try:
                process.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(alive, timeout=5)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def head():
    """One head for the module's jobs: `ray start` and its dashboard take most of a minute on a loaded machine."""
    assert RAY.is_file(), (
        f"no ray command beside {sys.executable}: run the tests with the project's venv (bash scripts/test.sh)"
    )
    head = LocalHead()
    try:
        head.start()
        yield head
    finally:
        head.stop()


def job_logs(client, job_id: str) -> str:
    try:
        return client.get_job_logs(job_id)[-8000:]
    except Exception as err:  # the logs are for the failure message; their absence must not hide it
        return f"(no logs: {err})"


def submit_and_wait(head: LocalHead, *entrypoint: str) -> tuple[object, str]:
    """`ray job submit --working-dir . -- ENTRYPOINT` on the head; waits for the job to end and
    fails the test unless it succeeded. Returns the job client and the job's id."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    job_id = f"conductor-test-{os.getpid()}-{random.randrange(1 << 30)}"
    # Environment variables reach the job (and every actor) through the runtime environment,
    # as API keys do on a real cluster.
    runtime_env = {"env_vars": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}}
    submitted = head.run(
        "job",
        "submit",
        "--address",
        head.dashboard,
        "--working-dir",
        ".",
        "--submission-id",
        job_id,
        "--runtime-env-json",
        json.dumps(runtime_env),
        "--no-wait",
        "--",
        *entrypoint,
    )
    assert submitted.returncode == 0, f"ray job submit failed:\n{submitted.stdout[-3000:]}\n{submitted.stderr[-3000:]}"

    client = JobSubmissionClient(head.dashboard)
    deadline = time.monotonic() + JOB_TIMEOUT_S
    status = client.get_job_status(job_id)
    while not status.is_terminal():
        if time.monotonic() > deadline:
            client.stop_job(job_id)
            pytest.fail(f"job still {status} after {JOB_TIMEOUT_S} s; logs:\n{job_logs(client, job_id)}")
        time.sleep(2)
        status = client.get_job_status(job_id)
    assert status == JobStatus.SUCCEEDED, f"job {status}:\n{job_logs(client, job_id)}"
    return client, job_id


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_submitted_training_job_writes_its_checkpoint(head: LocalHead, tmp_path: Path) -> None:
    started = time.monotonic()
    out = tmp_path / "run"  # absolute: the job runs in a copy of the repository elsewhere
    overrides = [
        "conductor.model=tiny-qwen2",
        "train.iterations=1",
        "train.rollouts_per_question=4",
        "train.questions_per_iteration=2",
        "conductor.max_new_tokens=64",
        "train.progress=false",
        "train.warm_start.steps=0",
        f"train.output_dir={out}",
        "cluster.generator={CPU: 1}",
        "cluster.learner={CPU: 1}",
    ]
    client, job_id = submit_and_wait(head, "python", "-m", "jobs.train", *overrides)
    job_s = time.monotonic() - started

    checkpoint = out / "checkpoints" / "ckpt-000000"
    assert (checkpoint / "state.json").is_file(), f"no checkpoint in {out}:\n{job_logs(client, job_id)}"
    state = json.loads((checkpoint / "state.json").read_text())
    assert state["iteration"] == 0
    assert (checkpoint / "model" / "config.json").is_file()
    assert any((checkpoint / "model").glob("*.safetensors"))
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 1

    # The upload is the repository without what .gitignore names (.venv, runs/, caches). The head is the
    # module's: the first job's upload is this one (another job's, of a tree that changed since, may follow).
    unpacked = Path(head.temp_dir) / "session_latest" / "runtime_resources" / "working_dir_files"
    uploads = [p for p in unpacked.glob("_ray_pkg_*") if p.is_dir()]  # beside it: its .zip.lock
    assert len(uploads) == 1, uploads
    uploaded = uploads[0]
    package = client.get_job_info(job_id).runtime_env["working_dir"]  # gcs://_ray_pkg_<hash>.zip
    assert uploaded.name == package.rsplit("/", 1)[-1].removesuffix(".zip"), (uploaded, package)
    assert (uploaded / "jobs" / "train.py").is_file()
    for ignored in (".venv", "runs", ".pytest_cache", ".hypothesis"):
        assert not (uploaded / ignored).exists(), f"{ignored} was uploaded with the working directory"
    size = sum(p.stat().st_size for p in uploaded.rglob("*") if p.is_file())
    assert size < 20 * 2**20, f"the working directory upload holds {size / 2**20:.1f} MiB"
    print(f"job finished in {job_s:.0f} s; upload {size / 2**20:.1f} MiB")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_submitted_evaluation_job_writes_its_results(head: LocalHead, tmp_path: Path) -> None:
    """`conductor-rl evaluate` as a job: it joins the head's cluster (RAY_ADDRESS) and writes its table."""
    from conductor_rl.config import load_config

    started = time.monotonic()
    out = tmp_path / "eval"  # absolute: the job runs in a copy of the repository elsewhere
    client, job_id = submit_and_wait(
        head,
        "python",
        "-m",
        "jobs.evaluate",
        "--method",
        "single:*",
        "--benchmark",
        "samples:math500",
        "--limit",
        "2",
        "--output",
        str(out),
        "evaluate.progress=false",
    )
    logs = job_logs(client, job_id)
    assert (out / "results.json").is_file(), f"no results in {out}:\n{logs}"
    results = json.loads((out / "results.json").read_text())
    workers = [w.name for w in load_config(None).workers]
    cells = {(c["method"], c["benchmark"]): c for c in results["cells"]}
    assert sorted(cells) == sorted((f"single:{w}", "samples:math500") for w in workers), sorted(cells)
    for cell in cells.values():
        assert cell["questions"] == 2 and cell["accuracy"] is not None and cell["errors"] == 0, cell
    assert results["info"]["stopped"] == "finished" and results["simulated"] is True
    assert "Started a local Ray instance" not in logs, f"the job must join the head's cluster:\n{logs}"
    assert (out / "results.md").is_file() and (out / "records.parquet").is_file()
    print(f"evaluation job finished in {time.monotonic() - started:.0f} s")


def test_cluster_yaml_offers_what_paper_yaml_places() -> None:
    """ray_cluster.yaml is a valid cluster-launcher config, and each actor type of
    configs/paper.yaml fits on a node type that declares its custom resource."""
    import yaml
    from ray.autoscaler._private.util import prepare_config, validate_config

    from conductor_rl.config import load_config

    launcher = prepare_config(yaml.safe_load((REPO / "ray_cluster.yaml").read_text()))  # what `ray up` does first
    validate_config(launcher)
    node_types = launcher["available_node_types"]
    config = load_config(REPO / "configs" / "paper.yaml")
    c = config.cluster
    demands = {
        "generator": (c.generator, config.generator.engines),
        "learner": (c.learner, config.learner.world_size),
        "worker": (c.worker, config.train.worker_replicas * len(config.workers)),
        "grader": (c.grader, config.grader.actors),
    }
    for actor, (resources, _count) in demands.items():
        custom = [k for k in resources if k not in ("CPU", "GPU")]
        assert custom, f"cluster.{actor} names no node type"
        homes = [name for name, t in node_types.items() if all(k in t["resources"] for k in custom)]
        assert homes, f"no node type declares {custom} (cluster.{actor})"
        assert all(node_types[h].get("max_workers", 0) >= 1 for h in homes), homes
    # Generators and learner ranks share the GPU node type: together they must fit on one node
    # (the learner's placement group packs its ranks).
    gpu_node = next(t for t in node_types.values() if "conductor_gpu_node" in t["resources"])
    need = {
        k: c.generator.get(k, 0) * config.generator.engines + c.learner.get(k, 0) * config.learner.world_size
        for k in ("GPU", "CPU", "conductor_gpu_node")
    }
    assert all(need[k] <= gpu_node["resources"][k] for k in need), (need, gpu_node["resources"])
    assert node_types[launcher["head_node_type"]]["resources"].get("CPU", 0) == 0  # nothing lands on the head
