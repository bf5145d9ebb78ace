"""The Ray cluster a job runs on: joined (`cluster.address`, RAY_ADDRESS) or started in this process
(`start_ray`), its nodes as the placement check sees them (`cluster_nodes`), and the check that a
job's actors fit before any starts (`check_cluster_fit`)."""

from __future__ import annotations

import json
import os
from types import ModuleType

from conductor_rl.config import Config
from conductor_rl.run.demands import job_demands, local_cpu_demand
from conductor_rl.run.placement import Node, require_fit
from jobs.common import log

LOCAL_START_ATTEMPTS = 3  # local Ray starts tried when Ray's fixed registration wait runs out


def start_ray(config: Config) -> ModuleType:
    """Join the cluster named by `cluster.address` or RAY_ADDRESS (what `ray job
    submit` sets), else start a local one in this process."""
    import ray

    if ray.is_initialized():
        return ray
    address = config.cluster.address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, log_to_driver=True)
    else:
        # Phases run one after another, so a local cluster may promise more CPUs than
        # the machine has: every actor type gets the logical CPUs it asks for.
        wanted = local_cpu_demand(config)
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a private cluster in this process needs no token
        # address="local": a new cluster, even if `ray start` left one running on this machine.
        for attempt in range(1, LOCAL_START_ATTEMPTS + 1):
            try:
                cpus = config.cluster.local_cpus or max(os.cpu_count() or 1, wanted)
                context = ray.init(
                    address="local",
                    num_cpus=cpus,
                    include_dashboard=config.cluster.dashboard,
                    dashboard_host="127.0.0.1",
                    log_to_driver=False,
                    _node_ip_address="127.0.0.1",
                )
                break
            except Exception as err:
                # Ray waits a fixed 30 s for a new node to register; a machine busy with other
                # clusters can take longer. That, and only that, is worth another start.
                if "timed out during startup" not in str(err) or attempt == LOCAL_START_ATTEMPTS:
                    raise
                log(
                    f"the local Ray node was slow to start on a busy machine; starting it again ({attempt + 1}/"
                    f"{LOCAL_START_ATTEMPTS})"
                )
                ray.shutdown()
        if config.cluster.dashboard:
            log(f"Ray dashboard: http://{context.dashboard_url}")
    return ray


def cluster_nodes() -> tuple[list[Node], bool]:
    """The live nodes' total resources, the node types an autoscaler may still add (where Ray reports
    them), and whether an autoscaler runs whose node types Ray does not report."""
    import ray

    nodes = []
    for n in ray.nodes():
        if not n.get("Alive"):
            continue
        total = n.get("Resources", {})
        head = "node:__internal_head__" in total
        nodes.append(
            Node(
                f"{'the head' if head else 'node'} {n.get('NodeManagerAddress')} ({n['NodeID'][:8]})",
                {k: float(v) for k, v in total.items() if not k.startswith("node:")},
                head=head,
            )
        )
    try:  # Ray-internal: the autoscaler's node types (autoscaler v2, KubeRay); None elsewhere
        from ray._private.state import state

        groups = state.get_cluster_config()
    except Exception:
        groups = None
    if groups is not None and groups.node_group_configs:
        for g in groups.node_group_configs:
            resources = {k: float(v) for k, v in g.resources.items()}
            up = sum(all(n.resources.get(k) == v for k, v in resources.items()) for n in nodes)
            more = None if g.max_count == -1 else max(0, g.max_count - up)
            if more != 0:
                nodes.append(Node(g.name, resources, live=False, count=more))
        return nodes, False
    try:  # the v1 autoscaler's status: node types named by a config, or `node_<id>` where none can be added
        from ray.experimental import internal_kv

        status = json.loads(internal_kv._internal_kv_get("__autoscaling_status") or b"{}")
        types = (status.get("autoscaler_report") or {}).get("node_type_mapping") or {}
        may_grow = any(name != f"node_{node_id}" for node_id, name in types.items())
    except Exception:
        may_grow = False
    return nodes, may_grow


def check_cluster_fit(
    config: Config, has_gpus: bool, *, training: bool = True, graders: bool = True, replicas: int | None = None
) -> None:
    """Refuse (ClusterTooSmallError) a job whose actors the cluster cannot hold, before any starts:
    Ray would leave them waiting with no error. The keywords are job_demands'."""
    nodes, may_grow = cluster_nodes()
    demands = job_demands(config, has_gpus, training=training, graders=graders, replicas=replicas)
    report = require_fit(demands, nodes, may_grow, mode=config.cluster.fit_check)
    if report is None:
        return
    if not report.fits:
        log(f"warning: {report.message()}")
    elif report.added:
        log(
            "the job fits once the autoscaler adds "
            + ", ".join(f"{n} x {t}" for t, n in report.added.items())
            + f" ({report.summary()})"
        )
