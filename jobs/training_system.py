"""Bring up what training runs on: the Ray cluster, then the generator engines,
the learner ranks, the worker pool (one WorkerPool per worker, a shared cost
ledger) and the grader pool, each placed by `cluster.*` resources. `ask`
starts the same cluster and worker pools (`start_worker_pools`)."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import Any

from conductor_rl.config import Config
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
    c = config.cluster
    machine = os.cpu_count() or 1
    engine = c.generator.get("CPU", machine)
    rank = c.learner.get("CPU", machine)
    return int(round(engine * config.generator.engines + rank * config.learner.world_size
                     + c.grader.get("CPU", 1.0) * config.grader.actors
                     + c.worker.get("CPU", 0.25) * config.train.worker_replicas * len(config.workers) + 0.5))


def split_resources(resources: dict[str, float]) -> tuple[float, float, dict[str, float]]:
    """{'CPU': 2, 'GPU': 1, 'gpu_node': 1} -> (num_cpus, num_gpus, custom resources)."""
    custom = {k: v for k, v in resources.items() if k not in ("CPU", "GPU")}
    return resources.get("CPU", 0.0), resources.get("GPU", 0.0), custom


def generator_placement(config: Config, has_gpus: bool) -> tuple[dict[str, float], dict[str, Any]]:
    """One generator engine's resources (`cluster.generator`; empty: its GPUs where the
    cluster has them, else every CPU of this machine) and the Ray actor options they make."""
    resources = dict(config.cluster.generator) or (
        {"GPU": config.generator.tensor_parallel_size} if has_gpus else {"CPU": float(os.cpu_count() or 1)})
    cpus, gpus, custom = split_resources(resources)
    return resources, {"num_cpus": cpus, "num_gpus": gpus, **({"resources": custom} if custom else {})}


@dataclass
class WorkerPools:
    """One WorkerPool per configured worker (in order), spending against one ledger."""

    pools: list[Any]
    ledger: Any

    def shutdown(self) -> None:
        import ray

        for pool in self.pools:
            for replica in pool.replicas:
                ray.kill(replica)
        ray.kill(self.ledger)


def start_worker_pools(config: Config, budget_usd: float | None, replicas: int = 1) -> WorkerPools:
    """The worker pools on the cluster: `replicas` WorkerActors per worker, placed
    by `cluster.worker`, each behind the cluster's rate limiters and a new ledger
    capped at `budget_usd` (None: no cap)."""
    from actors.worker_pool import WorkerPool, get_ledger

    ledger = get_ledger(budget_usd, name=f"ledger-{uuid.uuid4().hex[:12]}")
    cpus, _, custom = split_resources(config.cluster.worker)
    pools = [WorkerPool(w, replicas, ledger=ledger, seed=config.conductor.seed, num_cpus=cpus, resources=custom or None)
             for w in config.workers]
    return WorkerPools(pools, ledger)


@dataclass
class TrainingSystem:
    generators: Any
    learners: Any
    weight_sync: Any
    workers: list[Any]
    graders: Any
    ledger: Any

    def shutdown(self) -> None:
        for part in (self.generators, self.learners):
            part.shutdown()
        WorkerPools(self.workers, self.ledger).shutdown()
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
    machine = float(os.cpu_count() or 1)

    generator, engine_options = generator_placement(config, has_gpus)
    transport = resolve_weight_sync(config.generator.weight_sync, config.generator.backend, has_gpus)
    log(f"starting {config.generator.engines} generator engine(s) ({config.generator.backend}, {generator}; "
        f"weights by {transport}) ...")
    generators = GeneratorPool(model, config.generator, seed=config.conductor.seed, resources=engine_options,
                               weights_version=weights_version,
                               weight_transfer=None if transport == "object_store" else transport)

    rank = dict(c.learner) or ({"GPU": 1, "CPU": 1} if has_gpus else {"CPU": machine})
    log(f"starting {config.learner.world_size} learner rank(s) ({rank}) ...")
    learners = LearnerGroup(model, config.learner, total_steps, resources_per_rank=rank)
    weight_sync = WeightSync(learners, generators, transport, config.generator.tensor_parallel_size)

    workers = start_worker_pools(config, config.train.budget_usd, config.train.worker_replicas)
    cpus, _, custom = split_resources(c.grader)
    graders = GraderPool(config.grader, num_cpus=cpus, resources=custom or None)
    graders.wait_ready()
    return TrainingSystem(generators, learners, weight_sync, workers.pools, graders, workers.ledger)
