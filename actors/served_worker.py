"""Served workers on Ray: one `ServedWorkerActor` per replica of each deployment
runs vLLM's OpenAI-compatible server as a child process on its node
(conductor_rl/workers/serving.py), and `ServedWorkers` starts them all from the
driver and hands each worker the URLs of its replicas.

- Placement: each replica asks for `serve.cpus`, `serve.gpus` and
  `serve.resources`; Ray's GPU assignment (CUDA_VISIBLE_DEVICES) reaches the
  server through the environment it inherits.
- Address: the server binds a free port on the node's IP; the replica reports
  `http://<node ip>:<port>/v1`.
- No orphans: the server runs under conductor_rl.workers.process_guard in a
  process group of its own, which ends that group when the actor process goes,
  however it goes (`ray.kill`, a driver that exits or crashes, a node agent that
  kills it). `stop()` ends it at once and waits.

Why not Ray Serve LLM (`ray.serve.llm`): docs/decisions.md, "Worker pools".
"""

from __future__ import annotations

import secrets
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import ray

from conductor_rl.config import ServeSpec, WorkerConfig
from conductor_rl.workers.providers.keys import Secret
from conductor_rl.workers.serving import (
    Deployment,
    ServedWorkerError,
    ServerProcess,
    check_served_workers,
    group_deployments,
    start_server,
)


def _log_dir() -> Path:
    """Servers' logs on the replica's node: beside Ray's session logs when there are any."""
    try:
        session = Path(ray._private.worker._global_node.get_session_dir_path())  # noqa: SLF001
        return session / "logs" / "served-workers"
    except Exception:  # no session directory reachable: a temporary folder does
        return Path(tempfile.gettempdir()) / "conductor-rl-served-workers"


def _node_ip() -> str:
    """The address this node joined the cluster with (what other nodes reach it at; 127.0.0.1 for a
    local cluster started so), rather than whatever interface the default route names."""
    node_id = ray.get_runtime_context().get_node_id()
    for node in ray.nodes():
        if node.get("NodeID") == node_id and node.get("NodeManagerAddress"):
            return node["NodeManagerAddress"]
    return ray.util.get_node_ip_address()


@ray.remote(max_concurrency=4)  # stop() and log_tail() must run while start() waits for the server
class ServedWorkerActor:
    def __init__(
        self, name: str, spec: ServeSpec, served_names: Sequence[str], replica: int = 0, api_key: Secret | None = None
    ) -> None:
        """`api_key`: the key the server requires of every request (generated per deployment by the job)."""
        self.name, self.spec, self.served_names, self.replica = name, spec, tuple(served_names), replica
        self.api_key = api_key
        self._server: ServerProcess | None = None
        self._lock = threading.Lock()
        self._stopped = False

    def start(self) -> dict[str, Any]:
        """Start the server and wait until it is healthy: {'base_url', 'seconds', 'node', 'port', 'pgid', 'log'}.
        Raises ServedWorkerError (with the server's last log lines) on a timeout or an early exit."""
        host = _node_ip()
        server, seconds = start_server(
            f"{self.name}#{self.replica}",
            self.spec,
            self.served_names,
            host,
            _log_dir(),
            on_retry=lambda msg: print(msg, flush=True),
            api_key=self.api_key.reveal() if self.api_key is not None else None,
        )
        with self._lock:
            self._server = server
            if self._stopped:  # stop() came while the server was starting
                server.stop()
                raise ServedWorkerError(f"served worker {self.name!r}: stopped while starting")
        return {
            "base_url": server.base_url,
            "seconds": seconds,
            "node": host,
            "port": server.port,
            "pgid": server.pgid,
            "log": str(server.log_path),
        }

    def running(self) -> bool:
        return self._server is not None and self._server.returncode is None

    def log_tail(self, lines: int = 40) -> str:
        return self._server.tail(lines) if self._server is not None else "(not started)"

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            server = self._server
        if server is not None:
            server.stop()

    def __ray_shutdown__(self) -> None:  # a graceful actor exit; ray.kill skips it and the guard does the work
        self.stop()


class ServedWorkers:
    """Every deployment's replicas, started in parallel. `urls[i]`: worker i's replica URLs (None: not
    served); `replicas[d][r]`: what replica r of deployment d reported (base_url, node, port, log, and
    pgid, the server's process group)."""

    def __init__(
        self,
        deployments: list[Deployment],
        actors: list[list[Any]],
        replicas: list[list[dict[str, Any]]],
        n_workers: int,
        keys: Sequence[Secret] = (),
    ) -> None:
        self.deployments, self.actors, self.replicas = deployments, actors, replicas
        self.urls: list[list[str] | None] = [None] * n_workers
        self.keys: list[Secret | None] = [None] * n_workers
        for d_index, (deployment, infos) in enumerate(zip(deployments, replicas)):
            for i in deployment.workers:
                if i < n_workers:
                    self.urls[i] = [info.get("base_url", "") for info in infos]
                    self.keys[i] = keys[d_index] if d_index < len(keys) else None

    def __len__(self) -> int:
        return len(self.deployments)

    @classmethod
    def start(cls, workers: Sequence[WorkerConfig], log: Callable[[str], None] = print) -> ServedWorkers:
        """Start the replicas of every served worker and wait until all are healthy. On any failure every
        replica is stopped and the first failure is raised (ServedWorkerError, with its server's log)."""
        check_served_workers(workers)
        deployments = group_deployments(workers)
        actors: list[list[Any]] = []
        pending: dict[Any, tuple[int, int, float]] = {}  # ref -> (deployment, replica, deadline)
        started = time.monotonic()
        # Each deployment's servers require a key of their own: they listen on the node's address.
        keys = [Secret(secrets.token_urlsafe(32)) for _ in deployments]
        for d_index, d in enumerate(deployments):
            names = f" (as {', '.join(d.served_names)})" if len(d.workers) > 1 else ""
            log(
                f"starting served worker {d.name}{names} ({d.replicas} replica(s) of {d.spec.model}; per replica "
                f"{_placement_text(d.spec)}) ..."
            )
            options = {"num_cpus": d.spec.cpus, "num_gpus": d.spec.gpus}
            if d.spec.resources:
                options["resources"] = dict(d.spec.resources)
            replicas = [
                ServedWorkerActor.options(**options).remote(d.name, d.spec, d.served_names, r, keys[d_index])
                for r in range(d.replicas)
            ]
            actors.append(replicas)
            for r, actor in enumerate(replicas):
                # Placement may wait for a node (an autoscaler adds one); it gets a start timeout of its own.
                pending[actor.start.remote()] = (d_index, r, started + 2 * d.spec.start_timeout_s)
        infos: list[list[dict[str, Any]]] = [[{} for _ in range(d.replicas)] for d in deployments]
        served = cls(deployments, actors, infos, 0)  # for the clean-up below: stopping needs only the actors
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=5.0)
                for ref in ready:
                    d_index, r, _deadline = pending.pop(ref)
                    d = deployments[d_index]
                    try:
                        info = ray.get(ref)
                    except ray.exceptions.RayTaskError as err:
                        cause = err.cause
                        raise (
                            cause
                            if isinstance(cause, ServedWorkerError)
                            else ServedWorkerError(
                                f"served worker {d.name!r} replica {r}: {type(cause).__name__}: {cause}"
                            )
                        ) from None
                    except ray.exceptions.RayActorError as err:
                        raise ServedWorkerError(
                            f"served worker {d.name!r} replica {r}: its actor died while the "
                            f"server started ({err}); see the Ray logs of its node"
                        ) from None
                    infos[d_index][r] = info
                    log(
                        f"served {d.name} at {info['base_url']} in {info['seconds']:.0f} s (replica {r + 1}/"
                        f"{d.replicas}, log {info['log']})"
                    )
                now = time.monotonic()
                for _ref, (d_index, r, deadline) in list(pending.items()):
                    if now > deadline:
                        d = deployments[d_index]
                        raise ServedWorkerError(
                            f"served worker {d.name!r} replica {r} was not running after "
                            f"{2 * d.spec.start_timeout_s:g} s: no node could take it ({_placement_text(d.spec)}) or "
                            f"it hung. Fix: see `ray status` for pending demands; give a node type those resources "
                            f"(ray_cluster.yaml), or lower workers.<i>.serve.gpus/cpus/resources"
                        )
        except BaseException:
            served.shutdown()
            raise
        return cls(deployments, actors, infos, len(workers), keys)

    def urls_for(self, worker_index: int) -> list[str] | None:
        return self.urls[worker_index]

    def key_for(self, worker_index: int) -> Secret | None:
        """The key worker `worker_index`'s servers require (None: not served)."""
        return self.keys[worker_index]

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Stop every server (each waits for its process group), then the actors."""
        handles = [a for replicas in self.actors for a in replicas]
        refs = [a.stop.remote() for a in handles]
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        for actor in handles:
            ray.kill(actor)  # whatever stop() left, the guard ends when the actor process goes
        self.actors = []


def _placement_text(spec: ServeSpec) -> str:
    parts = [f"CPU {spec.cpus:g}"] + ([f"GPU {spec.gpus:g}"] if spec.gpus else [])
    parts += [f"{k} {v:g}" for k, v in spec.resources.items()]
    return ", ".join(parts)


def served_workers_on(workers: Sequence[WorkerConfig]) -> bool:
    return any(w.serve is not None for w in workers)


__all__ = ["ServedWorkerActor", "ServedWorkers", "served_workers_on"]
