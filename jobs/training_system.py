"""The system's Ray half, started in this one place: the Ray cluster, then the generator
engines, the learner ranks, the worker pool (one WorkerPool per worker, a shared cost
ledger) and the grader pool, each placed by `cluster.*` resources. `ask`, `check`,
`evaluate` and `serve` start the parts they need from here (`start_worker_pools`,
`start_generators`, `start_graders`); the settings-derived half is conductor_rl/system.py."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from conductor_rl.config import Config
from conductor_rl.run.demands import (
    generator_placement,
    job_demands,
    learner_placement,
    local_cpu_demand,
    split_resources,
)
from conductor_rl.run.placement import Node, require_fit
from conductor_rl.system import System
from jobs.common import log

if TYPE_CHECKING:
    from ray.actor import ActorHandle

    from actors.generator import GeneratorPool
    from actors.grader import GraderPool
    from actors.learner import LearnerGroup
    from actors.served_worker import ServedWorkers
    from actors.weight_sync import WeightSync
    from actors.worker_pool import WorkerPool
    from conductor_rl.workers.providers.conductor import ConductorSeat


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


@dataclass
class WorkerPools:
    """One WorkerPool per configured worker (in order), spending against one ledger;
    `served`: the vLLM servers of the served workers (actors/served_worker.py), or None."""

    pools: list[WorkerPool | ConductorSeat]
    ledger: ActorHandle
    served: ServedWorkers | None = None

    def shutdown(self) -> None:
        import ray

        for pool in self.pools:
            for replica in getattr(pool, "replicas", ()):  # the Conductor's own seat has none
                ray.kill(replica)
        ray.kill(self.ledger)
        if self.served is not None:
            self.served.shutdown()


def start_worker_pools(
    config: Config, budget_usd: float | None, replicas: int = 1, *, graders: bool = False, checked: bool = False
) -> WorkerPools:
    """The worker pools on the cluster: `replicas` WorkerActors per worker, placed
    by `cluster.worker`, each behind the cluster's rate limiters and a new ledger
    capped at `budget_usd` (None: no cap). Served workers (`workers.<i>.serve`) get
    their vLLM servers first, and their pools one WorkerActor per server at least."""
    from actors.served_worker import ServedWorkers, served_workers_on
    from actors.worker_pool import WorkerPool, get_ledger
    from conductor_rl.workers.providers.conductor import ConductorSeat

    if not checked:  # `graders`: the caller starts the grader pool next (evaluate), so it must fit too
        import ray

        check_cluster_fit(
            config, ray.cluster_resources().get("GPU", 0) > 0, training=False, graders=graders, replicas=replicas
        )
    served = ServedWorkers.start(config.workers, log=log) if served_workers_on(config.workers) else None
    try:
        ledger = get_ledger(budget_usd, name=f"ledger-{uuid.uuid4().hex[:12]}")
        cpus, _, custom = split_resources(config.cluster.worker)
        # The Conductor's own seat (provider: conductor) is no actor: the workflow engine turns its steps
        # into recursive calls to the generator.
        pools = [
            ConductorSeat(w.name)
            if w.provider == "conductor"
            else WorkerPool(
                w,
                replicas,
                ledger=ledger,
                seed=config.conductor.seed,
                num_cpus=cpus,
                resources=custom or None,
                base_urls=served.urls_for(i) if served is not None else None,
            )
            for i, w in enumerate(config.workers)
        ]
    except BaseException:
        if served is not None:
            served.shutdown()
        raise
    return WorkerPools(pools, ledger, served)


@dataclass
class TrainingSystem:
    """Every actor of a training run; `workers`: one pool per configured worker, in order."""

    generators: GeneratorPool
    learners: LearnerGroup
    weight_sync: WeightSync
    workers: list[WorkerPool | ConductorSeat]
    graders: GraderPool
    ledger: ActorHandle
    served: ServedWorkers | None = None  # served workers' vLLM servers (WorkerPools.served)

    def shutdown(self) -> None:
        for part in (self.generators, self.learners):
            part.shutdown()
        WorkerPools(self.workers, self.ledger, self.served).shutdown()
        self.graders.close()


def start_generators(
    config: Config, model: str, weights_version: int = 0, weight_transfer: str | None = None
) -> GeneratorPool:
    """The Conductor's generator engines (`generator.*`), placed by `generator_placement`; `model`: its
    weights (a checkpoint's folder, or conductor.model resolved)."""
    import ray

    from actors.generator import GeneratorPool

    _, options = generator_placement(config, ray.cluster_resources().get("GPU", 0) > 0)
    return GeneratorPool(
        model,
        config.generator,
        seed=config.conductor.seed,
        resources=options,
        weights_version=weights_version,
        weight_transfer=weight_transfer,
    )


def start_graders(config: Config) -> GraderPool:
    """The grader pool (`grader.*`, placed by `cluster.grader`), once every grader answers."""
    from actors.grader import GraderPool

    cpus, _, custom = split_resources(config.cluster.grader)
    graders = GraderPool(config.grader, num_cpus=cpus, resources=custom or None)
    graders.wait_ready()
    return graders


def start_together(*starts: Callable[[], Any]) -> list[Any]:
    """Run each start in a thread of its own and return what they built, in order. If one fails, what the
    others built is shut down and the first failure is raised."""
    with ThreadPoolExecutor(max_workers=len(starts), thread_name_prefix="start") as pool:
        futures = [pool.submit(start) for start in starts]
        wait(futures)
    failures = [f.exception() for f in futures if f.exception() is not None]
    if failures:
        for f in futures:
            if f.exception() is None:
                stop = getattr(f.result(), "shutdown", None) or getattr(f.result(), "close", None)
                if stop is not None:
                    stop()
        raise failures[0]
    return [f.result() for f in futures]


def build_system(config: Config, model: str, weights_version: int, total_steps: int) -> TrainingSystem:
    """Start every actor; `model` is the Conductor to start from (a checkpoint's HF folder on resume)."""
    import ray

    from actors.learner import LearnerGroup
    from actors.weight_sync import WeightSync, resolve_weight_sync

    has_gpus = ray.cluster_resources().get("GPU", 0) > 0
    check_cluster_fit(config, has_gpus)  # before the first actor: one that cannot be placed waits forever

    generator, _ = generator_placement(config, has_gpus)
    transport = resolve_weight_sync(config.generator.weight_sync, config.generator.backend, has_gpus)
    log(
        f"starting {config.generator.engines} generator engine(s) ({config.generator.backend}, {generator}; "
        f"weights by {transport}) ..."
    )
    rank = learner_placement(config, has_gpus)
    log(f"starting {config.learner.world_size} learner rank(s) ({rank}) ...")
    # Engines, ranks, worker pools and graders start at the same time: each start is mostly one process's
    # imports and model load, or a server's start.
    generators, learners, workers, graders = start_together(
        lambda: start_generators(
            config, model, weights_version, None if transport in ("object_store", "shared_memory") else transport
        ),
        lambda: LearnerGroup(
            model,
            config.learner,
            total_steps,
            resources_per_rank=rank,
            past_versions=System(config).learner_past_versions,
        ),
        lambda: start_worker_pools(config, config.train.budget_usd, config.train.worker_replicas, checked=True),
        lambda: start_graders(config),
    )
    weight_sync = WeightSync(
        learners,
        generators,
        transport,
        config.generator.tensor_parallel_size,
        fallback=config.generator.weight_sync == "auto",
        log=log,
    )
    return TrainingSystem(generators, learners, weight_sync, workers.pools, graders, workers.ledger, workers.served)
