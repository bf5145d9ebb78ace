"""Open-weight workers the job serves itself: vLLM's OpenAI-compatible server
as a child process (no Ray here; actors/served_worker.py gives it a place).

- `group_deployments`: workers with identical `serve` sections share one
  deployment (Qwen3-32B with and without thinking: two workers, one server that
  answers to both names).
- `server_command`: the vLLM command line from a `ServeSpec` (`engine_args` ->
  `--flag value`, true -> `--flag`, false -> `--no-flag`), the model resolved by
  `conductor_rl.models.resolve_model` (so 'smollm2-135m' works offline).
- `ServerProcess`: the server under `process_guard` in a process group of its
  own; `wait_healthy` polls GET /health, then GET /v1/models until it lists every
  served name; `stop` ends the whole group.
- `start_server`: a free port, the process, the health check, and a new port
  when another process took the one picked (at most `PORT_ATTEMPTS` times).

Every failure is a `ServedWorkerError` that names the worker, quotes the
server's last log lines and says what to change.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conductor_rl.config import ServeSpec, WorkerConfig

#: vLLM's server module (`vllm serve` runs the same code; the module needs no console script on PATH).
VLLM_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
#: Arguments the job sets itself: the model from `serve.model`, the names from the workers, the address.
OWNED_ARGS = frozenset({"model", "served_model_name", "host", "port"})
#: Added unless engine_args say otherwise: an access-log line per call would fill the log in a training run.
DEFAULT_ENGINE_ARGS: dict[str, Any] = {"disable_uvicorn_access_log": True}
#: Added to a CPU replica's environment unless `serve.env` sets it: vLLM then runs the model in its engine
#: process instead of a third process pinned to one core; it starts sooner and uses every core
#: (benchmarks/served_worker.py measures both; docs/decisions.md).
CPU_SERVER_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
PORT_ATTEMPTS = 3
LOG_TAIL_LINES = 40
STOP_GRACE_S = 10.0


class ServedWorkerError(RuntimeError):
    """A served worker's server could not be started or did not become healthy; the
    message quotes its last log lines and says what to change."""


class PortInUseError(ServedWorkerError):
    """Another process bound the port between our pick and the server's bind."""


@dataclass(frozen=True)
class Deployment:
    """One `serve` section and the workers that share it."""

    name: str  # the first worker's name: logs, actor names
    spec: ServeSpec
    served_names: tuple[str, ...]  # every worker's `model`, as requests name it (--served-model-name)
    workers: tuple[int, ...]  # indices into config.workers

    @property
    def replicas(self) -> int:
        return self.spec.replicas


def spec_key(spec: ServeSpec) -> str:
    """Identical sections give identical keys (JSON with sorted keys)."""
    return json.dumps(spec.model_dump(mode="json"), sort_keys=True)


def group_deployments(workers: Sequence[WorkerConfig]) -> list[Deployment]:
    """The deployments of the served workers, in the order their first worker appears."""
    groups: dict[str, list[int]] = {}
    for i, worker in enumerate(workers):
        if worker.serve is not None:
            groups.setdefault(spec_key(worker.serve), []).append(i)
    deployments = []
    for indices in groups.values():
        first = workers[indices[0]]
        names = tuple(dict.fromkeys(workers[i].model for i in indices))  # unique, in order
        deployments.append(Deployment(first.name, first.serve, names, tuple(indices)))  # type: ignore[arg-type]
    return deployments


def check_served_workers(workers: Sequence[WorkerConfig]) -> None:
    """What can be known wrong before any server starts: a worker whose output budget the server's
    context cannot hold (vLLM answers every such call with HTTP 400)."""
    problems = []
    for i, w in enumerate(workers):
        if w.serve is None:
            continue
        args = {k.strip("-").replace("-", "_"): v for k, v in w.serve.engine_args.items()}
        limit = args.get("max_model_len")
        if isinstance(limit, int) and not isinstance(limit, bool) and w.max_tokens >= limit:
            problems.append(
                f"worker {w.name!r} asks for max_tokens={w.max_tokens} from a server with "
                f"max_model_len={limit} (prompt and output together): lower workers.{i}.max_tokens "
                f"or raise workers.{i}.serve.engine_args.max_model_len"
            )
    if problems:
        raise ServedWorkerError("\n".join(problems))


def served_resources(workers: Sequence[WorkerConfig]) -> dict[str, float]:
    """What all served replicas ask of the cluster together: {'CPU': .., 'GPU': .., custom: ..}
    (a shared deployment counted once)."""
    total: dict[str, float] = {}
    for d in group_deployments(workers):
        for key, value in {"CPU": d.spec.cpus, "GPU": d.spec.gpus, **d.spec.resources}.items():
            if value:
                total[key] = total.get(key, 0.0) + value * d.replicas
    return total


def _flag(key: str) -> str:
    return "--" + key.strip("-").replace("_", "-")


def engine_flags(engine_args: Mapping[str, Any]) -> list[str]:
    """`{max_model_len: 2048, enforce_eager: true, enable_prefix_caching: false}` ->
    `--max-model-len 2048 --enforce-eager --no-enable-prefix-caching`. None leaves a
    flag out; a list gives one value each (`--flag a b`); a dict goes as JSON
    (`--compilation-config '{...}'`)."""
    owned = sorted(k for k in engine_args if k.strip("-").replace("-", "_") in OWNED_ARGS)
    if owned:
        raise ServedWorkerError(
            f"serve.engine_args must not set {owned}: the job sets them (the model from serve.model, the "
            f"served names from the workers' `model`, host and port from the replica's node); remove them"
        )
    flags: list[str] = []
    for key, value in engine_args.items():
        if value is None:
            continue
        if value is True:
            flags.append(_flag(key))
        elif value is False:
            flags.append("--no-" + _flag(key)[2:])
        elif isinstance(value, dict):
            flags += [_flag(key), json.dumps(value)]
        elif isinstance(value, (list, tuple)):
            flags += [_flag(key), *(str(v) for v in value)]
        else:
            flags += [_flag(key), str(value)]
    return flags


def engine_args_for(spec: ServeSpec) -> dict[str, Any]:
    """`serve.engine_args` with the job's defaults under them, and the tensor-parallel size
    from `serve.gpus` (one process per GPU) when the section does not give one."""
    args = {**DEFAULT_ENGINE_ARGS, **spec.engine_args}
    normalized = {k.strip("-").replace("-", "_") for k in args}
    if spec.gpus >= 1 and "tensor_parallel_size" not in normalized:
        args["tensor_parallel_size"] = int(spec.gpus)
    return args


def server_command(
    spec: ServeSpec,
    served_names: Sequence[str],
    host: str,
    port: int,
    *,
    python: str = sys.executable,
    model_path: str | None = None,
) -> list[str]:
    """The vLLM server's command line. `model_path`: already resolved (default: resolve
    `spec.model` here, which converts an offline model into this node's cache once)."""
    if not served_names:
        raise ServedWorkerError(f"serve section for {spec.model!r} has no worker names to serve under")
    if model_path is None:
        from conductor_rl.models import resolve_model

        model_path = resolve_model(spec.model)
    return [
        python,
        "-m",
        VLLM_SERVER_MODULE,
        "--model",
        model_path,
        "--served-model-name",
        *served_names,
        "--host",
        host,
        "--port",
        str(port),
        *engine_flags(engine_args_for(spec)),
    ]


def guarded_command(
    command: Sequence[str],
    status_file: Path | str,
    parent_pid: int | None = None,
    grace_s: float = STOP_GRACE_S,
    python: str = sys.executable,
) -> list[str]:
    """`command` under conductor_rl.workers.process_guard, detached: it dies with `parent_pid` (default:
    this process) and writes its return code to `status_file`."""
    parent = os.getpid() if parent_pid is None else parent_pid
    return [
        python,
        "-m",
        "conductor_rl.workers.process_guard",
        "--parent",
        str(parent),
        "--status",
        str(status_file),
        "--grace",
        str(grace_s),
        "--detach",
        "--",
        *command,
    ]


#: All a vLLM server takes of the job's environment (which holds the provider keys): system, GPUs, Ray, libraries.
SERVER_ENV_NAMES = ("PATH", "HOME", "USER", "LANG", "TMPDIR", "TZ", "PYTHONPATH", "VIRTUAL_ENV", "LD_LIBRARY_PATH")
SERVER_ENV_PREFIXES = (
    "LC_", "XDG_", "CUDA_", "NVIDIA_", "NCCL_", "ROCR_", "HIP_", "HF_", "HUGGINGFACE_", "TRANSFORMERS_",
    "VLLM_", "TORCH", "OMP_", "MKL_", "OPENBLAS_", "KMP_", "RAY_", "CONDUCTOR_RL_CACHE", "TOKENIZERS_",
)  # fmt: skip
SERVER_KEY_VARIABLE = "VLLM_API_KEY"  # vLLM's --api-key, kept off the command line (readable in /proc)


def server_env(spec: ServeSpec, base: Mapping[str, str] | None = None, api_key: str | None = None) -> dict[str, str]:
    """The server's environment: of this process's, only SERVER_ENV_NAMES and SERVER_ENV_PREFIXES;
    `CPU_SERVER_ENV` without GPUs; `api_key` (required of every request then); then `serve.env`. The project
    root goes on PYTHONPATH: the guard module imports wherever the job's code lives (`ray job submit`)."""
    given = os.environ if base is None else base
    env = {k: v for k, v in given.items() if k in SERVER_ENV_NAMES or k.startswith(SERVER_ENV_PREFIXES)}
    env.pop(SERVER_KEY_VARIABLE, None)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    if spec.gpus == 0:
        env.update(CPU_SERVER_ENV)
    if api_key:
        env[SERVER_KEY_VARIABLE] = api_key
    env.update(spec.env)
    return env


def free_port(host: str = "127.0.0.1") -> int:
    """A port that nothing on `host` listens on now (the server binds it a moment later; see PortInUseError)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _get_json(url: str, timeout_s: float, api_key: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 (our own server's URL)
        body = response.read()
    return json.loads(body) if body.strip() else None


def probe(root_url: str, served_names: Sequence[str], timeout_s: float = 5.0, api_key: str | None = None) -> str | None:
    """None when the server at `root_url` (http://host:port) is healthy and lists every name under
    /v1/models; else what is missing. The names matter: a different server that took the port
    would answer /health too."""
    try:
        _get_json(f"{root_url}/health", timeout_s)
    except (urllib.error.URLError, OSError, ValueError) as err:
        return f"GET /health: {getattr(err, 'reason', err)}"
    try:
        listing = _get_json(f"{root_url}/v1/models", timeout_s, api_key)
    except (urllib.error.URLError, OSError, ValueError) as err:
        return f"GET /v1/models: {getattr(err, 'reason', err)}"
    ids = {m["id"] for m in (listing or {}).get("data", []) if isinstance(m, dict) and isinstance(m.get("id"), str)}
    missing = [n for n in served_names if n not in ids]
    return f"GET /v1/models lists {sorted(ids)}, not {missing}" if missing else None


# What a log line says went wrong -> what to change.
_HINTS: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(r"address already in use|errno 98", re.I),
        "the port was taken between the pick and the bind; start again (the actor tries other ports by itself)",
    ),
    (
        re.compile(r"unrecognized arguments|invalid choice|error: argument", re.I),
        "a key of serve.engine_args is not an argument of this vLLM version (see `vllm serve --help=all`); "
        "keys are the flags without dashes, true/false for switches",
    ),
    (
        re.compile(r"out of memory|cannot allocate|memoryerror|oom", re.I),
        "the model does not fit: lower engine_args.max_model_len or gpu_memory_utilization, give the replica more "
        "GPUs (serve.gpus), or on a CPU lower env.VLLM_CPU_KVCACHE_SPACE (GiB of KV cache)",
    ),
    (
        re.compile(r"kv ?cache|VLLM_CPU_KVCACHE_SPACE|max_model_len.*(larger|greater)", re.I),
        "the KV cache does not hold one sequence of max_model_len: lower engine_args.max_model_len or raise the "
        "cache (env.VLLM_CPU_KVCACHE_SPACE on a CPU, engine_args.gpu_memory_utilization on a GPU)",
    ),
    (
        re.compile(
            r"repository not found|is not a local folder|does not appear to have a file|offline mode|"
            r"cannot find the requested files|no such file or directory",
            re.I,
        ),
        "serve.model is neither a folder on this node nor an offline model (smollm2-135m, gemma3-270m), and the hub "
        "cannot be reached from here: copy the weights to the node and give their folder",
    ),
    (
        re.compile(r"no module named .?vllm", re.I),
        "vLLM is not installed in this node's Python: run scripts/setup.sh on every node",
    ),
]


def hint_for(log_text: str) -> str:
    for pattern, hint in _HINTS:
        if pattern.search(log_text):
            return hint
    return (
        "read the log above; check serve.engine_args against `vllm serve --help=all` and that the model "
        "fits the replica (serve.gpus, engine_args.max_model_len)"
    )


def tail_lines(path: Path, lines: int = LOG_TAIL_LINES, max_bytes: int = 64_000) -> str:
    """The last `lines` lines of the log (read from its end, so a long log costs nothing)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return "(no log)"
    # Progress bars rewrite one line with carriage returns; keep each line's last state.
    rows = [row.rsplit("\r", 1)[-1] for row in data.splitlines()]
    return "\n".join(rows[-lines:])


class ServerProcess:
    """One vLLM server (or any command that speaks its health API) under the process guard, in a
    process group of its own whose id is `pgid`. The guard is detached (nobody's direct child), so
    the server's end is read from the guard's status file, and its processes from the group."""

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        env: Mapping[str, str],
        log_path: Path,
        host: str,
        port: int,
        served_names: Sequence[str],
    ) -> None:
        self.name = name
        self.command = list(command)
        self.env = dict(env)
        self.log_path = Path(log_path)
        self.status_path = self.log_path.with_suffix(".status")
        self.host, self.port = host, port
        self.served_names = tuple(served_names)
        self.pgid: int | None = None
        self.started_at = 0.0

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """What the OpenAI SDK takes as `base_url`."""
        return f"{self.root_url}/v1"

    @property
    def returncode(self) -> int | None:
        """The server's return code once it has ended (None while it runs)."""
        if self.pgid is None:
            return None
        try:
            return int(self.status_path.read_text())
        except (OSError, ValueError):
            pass
        from conductor_rl.workers.process_guard import members

        # No status and nobody left in the group: the guard was killed with its server.
        return None if members(self.pgid) else -9

    def start(self) -> ServerProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.status_path.unlink(missing_ok=True)
        with open(self.log_path, "ab") as log:
            # A session of its own: its process group holds the guard, the server and all the server starts.
            launcher = subprocess.Popen(
                guarded_command(self.command, self.status_path),
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.pgid = launcher.pid
        launcher.wait(timeout=60)  # it forks the guard and exits at once
        self.started_at = time.monotonic()
        return self

    def tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return tail_lines(self.log_path, lines)

    def wait_healthy(self, timeout_s: float, poll_s: float = 0.5) -> float:
        """Seconds from start to healthy. Raises ServedWorkerError (PortInUseError for a taken
        port) if the server exits first or is not healthy within `timeout_s`; the server is stopped then."""
        if self.pgid is None:
            raise RuntimeError("start() the server first")
        deadline = self.started_at + timeout_s
        reason: str | None = "not probed yet"
        while True:
            code = self.returncode
            if code is not None:
                self._raise_exited(code)
            key = self.env.get(SERVER_KEY_VARIABLE)
            reason = probe(self.root_url, self.served_names, timeout_s=min(5.0, max(poll_s, 1.0)), api_key=key)
            if reason is None:
                return time.monotonic() - self.started_at
            if time.monotonic() >= deadline:
                break
            time.sleep(poll_s)
        log = self.tail()
        self.stop()
        raise ServedWorkerError(
            f"served worker {self.name!r}: the vLLM server at {self.root_url} was not healthy within "
            f"serve.start_timeout_s={timeout_s:g} s (last check: {reason}). Its last log lines "
            f"({self.log_path}):\n{log}\nFix: raise workers.<i>.serve.start_timeout_s if it was still loading (a "
            f"large model's first download and load take many minutes); otherwise {hint_for(log)}"
        )

    def _raise_exited(self, code: int) -> None:
        log = self.tail()
        seconds = time.monotonic() - self.started_at
        self.stop()
        kind = PortInUseError if re.search(r"address already in use|errno 98", log, re.I) else ServedWorkerError
        raise kind(
            f"served worker {self.name!r}: the vLLM server exited with code {code} after {seconds:.0f} s, before "
            f"it answered its health check on port {self.port}. Its last log lines ({self.log_path}):\n{log}\n"
            f"Fix: {hint_for(log)}"
        )

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Stop the server and every process it started (its whole process group), and wait for them."""
        from conductor_rl.workers.process_guard import stop_group

        if self.pgid is not None and self.pgid != os.getpgrp():  # never our own group
            stop_group(self.pgid, grace_s)


def start_server(
    name: str,
    spec: ServeSpec,
    served_names: Sequence[str],
    host: str,
    log_dir: Path,
    *,
    command_for: Callable[[int], Sequence[str]] | None = None,
    on_retry: Callable[[str], None] | None = None,
    api_key: str | None = None,
) -> tuple[ServerProcess, float]:
    """Start one replica on a free port of `host` and wait until it is healthy:
    (the running server, seconds it took). `command_for(port)`: the command (default:
    vLLM's from `spec`; tests pass a small fake). A port another process took in the
    meantime costs a new attempt, at most PORT_ATTEMPTS."""
    if command_for is None:
        from conductor_rl.models import resolve_model

        model_path = resolve_model(spec.model)  # once, not per attempt: an offline model converts on first use
        command_for = lambda port: server_command(spec, served_names, host, port, model_path=model_path)  # noqa: E731
    env = server_env(spec, api_key=api_key)
    started = time.monotonic()
    for attempt in range(1, PORT_ATTEMPTS + 1):
        port = free_port(host)
        log_path = Path(log_dir) / f"{_slug(name)}-{port}.log"
        server = ServerProcess(name, command_for(port), env, log_path, host, port, served_names).start()
        remaining = spec.start_timeout_s - (time.monotonic() - started)
        try:
            server.wait_healthy(max(remaining, 1.0))
            return server, time.monotonic() - started
        except PortInUseError as err:
            if attempt == PORT_ATTEMPTS:
                raise
            if on_retry is not None:
                on_retry(f"served worker {name!r}: port {port} was taken; trying another ({err.__class__.__name__})")
    raise AssertionError("unreachable")


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "server"
