"""The system's Ray half, started in this one place: on the Ray cluster (jobs/ray_cluster.py), the generator
engines, the learner ranks, the worker pool (one WorkerPool per worker, a shared cost
ledger) and the grader pool, each placed by `cluster.*` resources. `ask`, `check`,
`evaluate` and `serve` start the parts they need from here (`start_worker_pools`,
`start_generators`, `start_graders`); the settings-derived half is conductor_rl/system.py."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conductor_rl.config import Config
from conductor_rl.run.demands import (
    generator_placement,
    learner_placement,
    split_resources,
)
from conductor_rl.system import System
from jobs.common import log
from jobs.ray_cluster import check_cluster_fit

if TYPE_CHECKING:
    from ray.actor import ActorHandle

    from actors.generator import GeneratorPool
    from actors.grader import GraderPool
    from actors.learner import LearnerGroup
    from actors.served_worker import ServedWorkers
    from actors.weight_sync import WeightSync
    from actors.worker_pool import WorkerPool
    from conductor_rl.workers.providers.conductor import ConductorSeat


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
    config: Config,
    budget_usd: float | None,
    replicas: int = 1,
    *,
    graders: bool = False,
    checked: bool = False,
    journal: Path | None = None,
    job: str = "",
) -> WorkerPools:
    """The worker pools on the cluster: `replicas` WorkerActors per worker, placed
    by `cluster.worker`, each behind the cluster's rate limiters and a new ledger
    capped at `budget_usd` (None: no cap). `journal`: the spend journal the ledger
    continues as a session of `job` (its books and budget count what it holds).
    Served workers (`workers.<i>.serve`) get their vLLM servers first, and their
    pools one WorkerActor per server at least."""
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
        ledger = get_ledger(
            budget_usd, f"ledger-{uuid.uuid4().hex[:12]}", str(journal) if journal is not None else None, job
        )
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
                api_key=served.key_for(i) if served is not None else None,
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


def build_system(
    config: Config, model: str, weights_version: int, total_steps: int, journal: Path | None = None
) -> TrainingSystem:
    """Start every actor; `model` is the Conductor to start from (a checkpoint's HF folder on resume);
    `journal`: the run's spend journal, which the ledger continues."""
    import ray

    from actors.learner import LearnerGroup
    from actors.weight_sync import WeightSync, resolve_weight_sync

    gpus = ray.cluster_resources().get("GPU", 0)
    has_gpus = gpus > 0
    check_cluster_fit(config, has_gpus)  # before the first actor: one that cannot be placed waits forever

    generator, _ = generator_placement(config, has_gpus)
    transport = resolve_weight_sync(config.generator.weight_sync, config.generator.backend, gpus)
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
        lambda: start_worker_pools(
            config, config.train.budget_usd, config.train.worker_replicas, checked=True, journal=journal, job="train"
        ),
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
