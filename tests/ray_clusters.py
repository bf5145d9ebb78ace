"""Ray clusters for tests and benchmarks: the arguments of the session's in-process
cluster (conftest.py), and `LocalCluster`, several nodes on this machine
(`ray.cluster_utils.Cluster`: a raylet per node, each with its own resources).

A `LocalCluster` is fenced off from every other Ray on the machine:
- its own temporary folder, also as RAY_TMPDIR while it runs: Ray writes the
  address of the cluster it starts to `<tmp>/ray/ray_current_cluster`, where a
  plain `ray.init()` of someone else would find it, and deletes that file on
  shutdown, whoever wrote it; its session folders and sockets live there too;
- random ports (GCS, node managers, agents) and no dashboard: the fixed defaults
  (6379, 8265, 52365) may belong to another cluster here;
- nodes declare the custom resources of ray_cluster.yaml's node types
  (`conductor_cpu_node`, `conductor_gpu_node`), so actors are placed by the same
  `cluster.*` settings as on a real cluster;
- `shutdown()` disconnects the driver and kills every process of every node, then
  checks that none is left (killing, by process id, any that is). Never `ray stop`:
  it kills every Ray process on the machine, whatever cluster it belongs to.

Ray is imported inside the functions: test modules that never start Ray import this.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Any

#: The session's in-process cluster (conftest.py `ray_cluster`), and what a test that
#: had to stop it starts again afterwards.
LOCAL_RAY = dict(num_cpus=8, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
OBJECT_STORE_BYTES = 80 * 1024 * 1024  # per node; the default 150 MiB per node adds up on a small machine
CPU_NODE = "conductor_cpu_node"  # ray_cluster.yaml's node-type resources
GPU_NODE = "conductor_gpu_node"


class LocalCluster:
    """A head (the driver's node) and any number of worker nodes, on this machine."""

    def __init__(self, head_cpus: float = 0, head_resources: dict[str, float] | None = None) -> None:
        from ray.cluster_utils import Cluster

        self.tmp = tempfile.mkdtemp(prefix="crl-mn-", dir="/tmp")  # short: socket paths live under it
        os.makedirs(os.path.join(self.tmp, "ray"))
        self._saved_tmpdir = os.environ.get("RAY_TMPDIR")
        os.environ["RAY_TMPDIR"] = self.tmp
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a private cluster needs no token
        self.cluster = None
        try:
            self.cluster = Cluster(
                initialize_head=True,
                head_node_args=self._node_args(
                    head_cpus, head_resources, include_dashboard=False, dashboard_agent_listen_port=None
                ),
            )
        except BaseException:
            self.shutdown()
            raise
        self.head = self.cluster.head_node

    def _node_args(self, num_cpus: float, resources: dict[str, float] | None, **extra: Any) -> dict[str, Any]:
        return dict(
            num_cpus=num_cpus,
            resources=resources or {},
            object_store_memory=OBJECT_STORE_BYTES,
            temp_dir=os.path.join(self.tmp, "ray"),
            **extra,
        )

    def add_node(self, num_cpus: float = 2, resources: dict[str, float] | None = None):
        """A worker node (a raylet of its own); returns Ray's node object (`.node_id`)."""
        return self.cluster.add_node(**self._node_args(num_cpus, resources))

    def remove_node(self, node) -> None:
        """Kill the node's processes (the raylet and every worker on it), as a lost machine."""
        self.cluster.remove_node(node, allow_graceful=False)

    def connect(self):
        """Join the cluster as its driver, on the head; returns the `ray` module."""
        import ray

        ray.init(address=self.cluster.address, log_to_driver=False)
        return ray

    def leftovers(self) -> list[int]:
        """Process ids of anything still running out of this cluster's folder."""
        import psutil

        found = []
        for process in psutil.process_iter(["pid", "cmdline"]):
            try:
                if any(self.tmp in part for part in process.info["cmdline"] or ()):
                    found.append(process.info["pid"])
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return found

    def shutdown(self) -> list[int]:
        """Disconnect, stop every node, restore RAY_TMPDIR; returns the ids of processes that had to be
        killed afterwards (empty when Cluster.shutdown stopped everything, as it should)."""
        import psutil
        import ray

        if ray.is_initialized():
            ray.shutdown()
        try:
            if self.cluster is not None:
                self.cluster.shutdown()
        finally:
            if self._saved_tmpdir is None:
                os.environ.pop("RAY_TMPDIR", None)
            else:
                os.environ["RAY_TMPDIR"] = self._saved_tmpdir
        left = self.leftovers()
        for pid in left:  # only processes of this cluster, each by its own id
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                pass
        time.sleep(0.5 if left else 0)
        shutil.rmtree(self.tmp, ignore_errors=True)
        return left


def on_node(node_id: str) -> dict[str, Any]:
    """Ray options that pin an actor to one node (a test's fake provider server on the head)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False)}
