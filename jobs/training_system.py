"""Bring up what training runs on: the Ray cluster, then the generator engines,
the learner ranks, the worker pool (one WorkerPool per worker, a shared cost
ledger) and the grader pool, each placed by `cluster.*` resources. `ask`
starts the same cluster and worker pools (`start_worker_pools`)."""

from __future__ import annotations

import json
import math
import os
import uuid
from dataclasses import dataclass
from typing import Any

from conductor_rl.config import Config
from conductor_rl.policy.staleness import behaviour_source
from conductor_rl.run.placement import Demand, Node, require_fit
from conductor_rl.workers.serving import group_deployments
from jobs.common import log


LOCAL_START_ATTEMPTS = 3   # local Ray starts tried when Ray's fixed registration wait runs out


def start_ray(config: Config) -> Any:
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
                context = ray.init(address="local", num_cpus=config.cluster.local_cpus or max(os.cpu_count() or 1, wanted),
                                   include_dashboard=config.cluster.dashboard, dashboard_host="127.0.0.1",
                                   log_to_driver=False, _node_ip_address="127.0.0.1")
                break
            except Exception as err:
                # Ray waits a fixed 30 s for a new node to register; a machine busy with other
                # clusters can take longer. That, and only that, is worth another start.
                if "timed out during startup" not in str(err) or attempt == LOCAL_START_ATTEMPTS:
                    raise
                log(f"the local Ray node was slow to start on a busy machine; starting it again ({attempt + 1}/"
                    f"{LOCAL_START_ATTEMPTS})")
                ray.shutdown()
        if config.cluster.dashboard:
            log(f"Ray dashboard: http://{context.dashboard_url}")
    return ray


def local_cpu_demand(config: Config) -> int:
    """Logical CPUs every actor of the job asks for together (`job_demands` without GPUs)."""
    total = sum(d.asks().get("CPU", 0.0) * d.count for d in job_demands(config, has_gpus=False))
    return math.ceil(total - 1e-9)


def split_resources(resources: dict[str, float]) -> tuple[float, float, dict[str, float]]:
    """{'CPU': 2, 'GPU': 1, 'gpu_node': 1} -> (num_cpus, num_gpus, custom resources)."""
    custom = {k: v for k, v in resources.items() if k not in ("CPU", "GPU")}
    return resources.get("CPU", 0.0), resources.get("GPU", 0.0), custom


def local_cpus(config: Config) -> float:
    """A CPU-only generator's or learner rank's CPUs when `cluster.*` does not say: every CPU of this
    machine when the phases take turns; half each when they run at once (train.max_staleness >= 1),
    since each computes with as many threads as it has CPUs."""
    cpus = os.cpu_count() or 1
    return float(cpus if config.train.max_staleness == 0 else max(1, cpus // 2))


def generator_placement(config: Config, has_gpus: bool) -> tuple[dict[str, float], dict[str, Any]]:
    """One generator engine's resources (`cluster.generator`; empty: its GPUs where the
    cluster has them, else `local_cpus`) and the Ray actor options they make."""
    resources = dict(config.cluster.generator) or (
        {"GPU": config.generator.tensor_parallel_size} if has_gpus else {"CPU": local_cpus(config)})
    cpus, gpus, custom = split_resources(resources)
    return resources, {"num_cpus": cpus, "num_gpus": gpus, **({"resources": custom} if custom else {})}


def learner_placement(config: Config, has_gpus: bool) -> dict[str, float]:
    """One learner rank's resources (`cluster.learner`; empty: a GPU and a CPU where the cluster
    has GPUs, else `local_cpus`)."""
    return dict(config.cluster.learner) or ({"GPU": 1, "CPU": 1} if has_gpus else {"CPU": local_cpus(config)})


def job_demands(config: Config, has_gpus: bool, *, training: bool = True, graders: bool = True,
                replicas: int | None = None) -> list[Demand]:
    """What the job's actors ask of the cluster, in the order they start: the one account of it, read by
    the fit check and by a local cluster's CPU count. `training`: generator engines and learner ranks
    too; `replicas`: WorkerActors per worker (None: train.worker_replicas)."""
    c = config.cluster
    demands: list[Demand] = []
    if training:
        engines, ranks = config.generator.engines, config.learner.world_size
        demands += [Demand("generator engine", generator_placement(config, has_gpus)[0], engines, "generator.engines",
                           engines, "cluster.generator"),
                    Demand("learner rank", learner_placement(config, has_gpus), ranks, "learner.world_size", ranks,
                           "cluster.learner")]
    replicas = config.train.worker_replicas if replicas is None else replicas
    deployments = group_deployments(config.workers)
    for d in deployments:   # each replica is a vLLM server; workers with identical `serve` sections share them
        i = d.workers[0]
        demands.append(Demand(f"served worker {d.name} replica", {"CPU": d.spec.cpus, "GPU": d.spec.gpus,
                                                                  **d.spec.resources},
                              d.replicas, f"workers.{i}.serve.replicas", d.replicas, f"workers.{i}.serve",
                              scalar_cpu=True))
    servers = {i: d.replicas for d in deployments for i in d.workers}
    # WorkerPool gives a served worker one WorkerActor per server at least.
    pools = sum(max(replicas, servers.get(i, 0)) for i in range(len(config.workers)))
    demands.append(Demand("worker replica", dict(c.worker), pools, "train.worker_replicas", replicas, "cluster.worker"))
    if graders:
        demands.append(Demand("grader", dict(c.grader), config.grader.actors, "grader.actors", config.grader.actors,
                              "cluster.grader"))
    return demands


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
        nodes.append(Node(f"{'the head' if head else 'node'} {n.get('NodeManagerAddress')} ({n['NodeID'][:8]})",
                          {k: float(v) for k, v in total.items() if not k.startswith("node:")}, head=head))
    try:   # Ray-internal: the autoscaler's node types (autoscaler v2, KubeRay); None elsewhere
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
    try:   # the v1 autoscaler's status: node types named by a config, or `node_<id>` where none can be added
        from ray.experimental import internal_kv

        status = json.loads(internal_kv._internal_kv_get("__autoscaling_status") or b"{}")
        types = (status.get("autoscaler_report") or {}).get("node_type_mapping") or {}
        may_grow = any(name != f"node_{node_id}" for node_id, name in types.items())
    except Exception:
        may_grow = False
    return nodes, may_grow


def check_cluster_fit(config: Config, has_gpus: bool, **parts: Any) -> None:
    """Refuse (ClusterTooSmallError) a job whose actors the cluster cannot hold, before any starts:
    Ray would leave them waiting with no error. `parts`: job_demands' keywords."""
    nodes, may_grow = cluster_nodes()
    report = require_fit(job_demands(config, has_gpus, **parts), nodes, may_grow, mode=config.cluster.fit_check)
    if report is None:
        return
    if not report.fits:
        log(f"warning: {report.message()}")
    elif report.added:
        log("the job fits once the autoscaler adds " + ", ".join(f"{n} x {t}" for t, n in report.added.items())
            + f" ({report.summary()})")


@dataclass
class WorkerPools:
    """One WorkerPool per configured worker (in order), spending against one ledger;
    `served`: the vLLM servers of the served workers (actors/served_worker.py), or None."""

    pools: list[Any]
    ledger: Any
    served: Any = None

    def shutdown(self) -> None:
        import ray

        for pool in self.pools:
            for replica in getattr(pool, "replicas", ()):   # the Conductor's own seat has none
                ray.kill(replica)
        ray.kill(self.ledger)
        if self.served is not None:
            self.served.shutdown()


def start_worker_pools(config: Config, budget_usd: float | None, replicas: int = 1, *, graders: bool = False,
                       checked: bool = False) -> WorkerPools:
    """The worker pools on the cluster: `replicas` WorkerActors per worker, placed
    by `cluster.worker`, each behind the cluster's rate limiters and a new ledger
    capped at `budget_usd` (None: no cap). Served workers (`workers.<i>.serve`) get
    their vLLM servers first, and their pools one WorkerActor per server at least."""
    from actors.served_worker import ServedWorkers, served_workers_on
    from actors.worker_pool import WorkerPool, get_ledger
    from conductor_rl.workers.providers.conductor import ConductorSeat

    if not checked:   # `graders`: the caller starts the grader pool next (evaluate), so it must fit too
        import ray

        check_cluster_fit(config, ray.cluster_resources().get("GPU", 0) > 0, training=False, graders=graders,
                          replicas=replicas)
    served = ServedWorkers.start(config.workers, log=log) if served_workers_on(config.workers) else None
    try:
        ledger = get_ledger(budget_usd, name=f"ledger-{uuid.uuid4().hex[:12]}")
        cpus, _, custom = split_resources(config.cluster.worker)
        # The Conductor's own seat (provider: conductor) is no actor: the workflow engine turns its steps
        # into recursive calls to the generator.
        pools = [ConductorSeat(w.name) if w.provider == "conductor" else
                 WorkerPool(w, replicas, ledger=ledger, seed=config.conductor.seed, num_cpus=cpus,
                            resources=custom or None, base_urls=served.urls_for(i) if served is not None else None)
                 for i, w in enumerate(config.workers)]
    except BaseException:
        if served is not None:
            served.shutdown()
        raise
    return WorkerPools(pools, ledger, served)


@dataclass
class TrainingSystem:
    generators: Any
    learners: Any
    weight_sync: Any
    workers: list[Any]
    graders: Any
    ledger: Any
    served: Any = None   # served workers' vLLM servers (WorkerPools.served)

    def shutdown(self) -> None:
        for part in (self.generators, self.learners):
            part.shutdown()
        WorkerPools(self.workers, self.ledger, self.served).shutdown()
        self.graders.close()


def build_system(config: Config, model: str, weights_version: int, total_steps: int) -> TrainingSystem:
    """Start every actor; `model` is the Conductor to start from (a checkpoint's HF folder on resume)."""
    import ray

    from actors.generator import GeneratorPool
    from actors.grader import GraderPool
    from actors.learner import LearnerGroup
    from actors.weight_sync import WeightSync, resolve_weight_sync

    c = config.cluster
    has_gpus = ray.cluster_resources().get("GPU", 0) > 0
    check_cluster_fit(config, has_gpus)   # before the first actor: one that cannot be placed waits forever

    generator, engine_options = generator_placement(config, has_gpus)
    transport = resolve_weight_sync(config.generator.weight_sync, config.generator.backend, has_gpus)
    log(f"starting {config.generator.engines} generator engine(s) ({config.generator.backend}, {generator}; "
        f"weights by {transport}) ...")
    generators = GeneratorPool(model, config.generator, seed=config.conductor.seed, resources=engine_options,
                               weights_version=weights_version,
                               weight_transfer=None if transport in ("object_store", "shared_memory") else transport)

    rank = learner_placement(config, has_gpus)
    log(f"starting {config.learner.world_size} learner rank(s) ({rank}) ...")
    l = config.learner
    source = behaviour_source(l.behaviour_logprobs, config.generator.backend, config.conductor.constrain_format,
                              l.zero_stage)
    learners = LearnerGroup(model, l, total_steps, resources_per_rank=rank,
                            past_versions=config.train.max_staleness if source == "learner" else 0)
    weight_sync = WeightSync(learners, generators, transport, config.generator.tensor_parallel_size,
                             fallback=config.generator.weight_sync == "auto", log=log)

    workers = start_worker_pools(config, config.train.budget_usd, config.train.worker_replicas, checked=True)
    cpus, _, custom = split_resources(c.grader)
    graders = GraderPool(config.grader, num_cpus=cpus, resources=custom or None)
    graders.wait_ready()
    return TrainingSystem(generators, learners, weight_sync, workers.pools, graders, workers.ledger, workers.served)
