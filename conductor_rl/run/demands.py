"""What the job's actors ask of the cluster, from the settings alone (no Ray here): each actor
type's resources (`cluster.*`, or defaults for this machine), how many of each start, and
the CPUs a local cluster must promise. jobs/training_system.py starts the actors with them;
`placement.py` decides whether they fit."""

from __future__ import annotations

import math
import os

from conductor_rl.config import Config
from conductor_rl.run.placement import Demand
from conductor_rl.workers.serving import group_deployments

ActorOptions = dict[str, float | dict[str, float]]  # Ray's num_cpus, num_gpus, resources


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


def generator_placement(config: Config, has_gpus: bool) -> tuple[dict[str, float], ActorOptions]:
    """One generator engine's resources (`cluster.generator`; empty: its GPUs where the
    cluster has them, else `local_cpus`) and the Ray actor options they make."""
    resources = dict(config.cluster.generator) or (
        {"GPU": config.generator.tensor_parallel_size} if has_gpus else {"CPU": local_cpus(config)}
    )
    cpus, gpus, custom = split_resources(resources)
    return resources, {"num_cpus": cpus, "num_gpus": gpus, **({"resources": custom} if custom else {})}


def learner_placement(config: Config, has_gpus: bool) -> dict[str, float]:
    """One learner rank's resources (`cluster.learner`; empty: a GPU and a CPU where the cluster
    has GPUs, else `local_cpus`)."""
    return dict(config.cluster.learner) or ({"GPU": 1, "CPU": 1} if has_gpus else {"CPU": local_cpus(config)})


def job_demands(
    config: Config, has_gpus: bool, *, training: bool = True, graders: bool = True, replicas: int | None = None
) -> list[Demand]:
    """What the job's actors ask of the cluster, in the order they start: the one account of it, read by
    the fit check and by a local cluster's CPU count. `training`: generator engines and learner ranks
    too; `replicas`: WorkerActors per worker (None: train.worker_replicas)."""
    c = config.cluster
    demands: list[Demand] = []
    if training:
        engines, ranks = config.generator.engines, config.learner.world_size
        demands += [
            Demand(
                "generator engine",
                generator_placement(config, has_gpus)[0],
                engines,
                "generator.engines",
                engines,
                "cluster.generator",
            ),
            Demand(
                "learner rank",
                learner_placement(config, has_gpus),
                ranks,
                "learner.world_size",
                ranks,
                "cluster.learner",
            ),
        ]
    replicas = config.train.worker_replicas if replicas is None else replicas
    deployments = group_deployments(config.workers)
    for d in deployments:  # each replica is a vLLM server; workers with identical `serve` sections share them
        i = d.workers[0]
        demands.append(
            Demand(
                f"served worker {d.name} replica",
                {"CPU": d.spec.cpus, "GPU": d.spec.gpus, **d.spec.resources},
                d.replicas,
                f"workers.{i}.serve.replicas",
                d.replicas,
                f"workers.{i}.serve",
                scalar_cpu=True,
            )
        )
    servers = {i: d.replicas for d in deployments for i in d.workers}
    # WorkerPool gives a served worker one WorkerActor per server at least.
    pools = sum(max(replicas, servers.get(i, 0)) for i in range(len(config.workers)))
    demands.append(Demand("worker replica", dict(c.worker), pools, "train.worker_replicas", replicas, "cluster.worker"))
    if graders:
        demands.append(
            Demand(
                "grader", dict(c.grader), config.grader.actors, "grader.actors", config.grader.actors, "cluster.grader"
            )
        )
    return demands
