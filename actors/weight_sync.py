"""WeightSync: after each learner step, the learner's weights go into every
generator engine, versioned. Two transports (`generator.weight_sync`):

- `object_store`: learner rank 0 puts its weights in Ray's object store once;
  each engine fetches them and loads them in place (vLLM's
  `collective_rpc("reload_weights")`, or transformers' `load_state_dict`).
  Works with any backend, on any hardware.
- `shared_memory`: learner rank 0 copies its weights into memory that every
  engine on its node has mapped (conductor_rl/policy/shared_weights.py); the
  engines load them from there, with no serialising. `auto` takes it on CPUs
  when every engine shares the learner's node, else the object store.
- `nccl` / `ipc` / `gloo`: vLLM's weight-transfer API
  (conductor_rl/policy/weight_transfer.py). With nccl and gloo, learner rank 0 and
  every vLLM worker join one process group and the learner broadcasts; NCCL
  keeps the weights on the GPUs, gloo is the same path on CPUs. With ipc the
  engines open the learner's GPU memory (CUDA IPC), for a learner and engines
  that share GPUs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ray
from ray.actor import ActorHandle

from conductor_rl.config import WEIGHT_TRANSFER_TRANSPORTS
from conductor_rl.policy.shared_weights import SharedMemoryTooSmall

if TYPE_CHECKING:
    from actors.generator import GeneratorPool
    from actors.learner import LearnerGroup


class NotColocated(RuntimeError):
    """Shared-memory weights need every engine on learner rank 0's node."""


def resolve_weight_sync(setting: str, backend: str, gpus: float) -> str:
    """`auto` with vLLM engines on GPUs: NCCL where the cluster has two or more (the learner and the
    engines on GPUs of their own), CUDA IPC on one (NCCL refuses two ranks on one device, which is
    where the learner and the engine then share it); else shared memory (WeightSync falls back to
    the object store for engines on other nodes)."""
    if setting == "auto":
        if gpus > 0 and backend == "vllm":
            return "nccl" if gpus >= 2 else "ipc"
        return "shared_memory"
    if setting in ("nccl", "ipc") and not gpus:
        raise ValueError(f"generator.weight_sync={setting} needs GPUs in the cluster: use gloo or object_store on CPUs")
    return setting


def local_transport() -> str:
    """The collective transport this machine allows: gloo without a GPU; NCCL
    between two or more GPUs; CUDA IPC when a learner and an engine share the only one."""
    import torch

    if not torch.cuda.is_available():
        return "gloo"
    return "nccl" if torch.cuda.device_count() >= 2 else "ipc"


class EnginesClient:
    """vLLM's weight-sync control plane (its `VLLMWeightSyncClient` protocol)
    over our GeneratorActors: each call goes to every engine and waits for all.
    Engine i's workers take transfer ranks 1 + i * tensor_parallel_size on;
    vLLM's own Ray client gives every handle the same ranks, as it expects one
    engine (with data parallelism) rather than several."""

    def __init__(self, actors: list[ActorHandle], tensor_parallel_size: int) -> None:
        self.actors, self.tp = actors, tensor_parallel_size

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        def for_engine(i: int) -> dict[str, Any]:  # ipc has no ranks
            return {**init_info, "rank_offset": 1 + i * self.tp} if "rank_offset" in init_info else init_info

        ray.get([a.init_weight_transfer_engine.remote(for_engine(i)) for i, a in enumerate(self.actors)])

    def start_weight_update(self) -> None:
        ray.get([a.start_weight_update.remote() for a in self.actors])

    def update_weights(self, update_info: dict[str, Any]) -> None:
        ray.get([a.update_weights.remote(update_info) for a in self.actors])

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        ray.get([a.finish_weight_update.remote() for a in self.actors])


class WeightSync:
    """Pushes a LearnerGroup's weights into a GeneratorPool by `transport`."""

    def __init__(
        self,
        learners: LearnerGroup,
        generators: GeneratorPool,
        transport: str,
        tensor_parallel_size: int = 1,
        fallback: bool = False,
        log: Callable[[str], None] = print,
    ) -> None:
        """`fallback`: where shared memory cannot serve (an engine on another node, too little
        memory), use the object store and say so (generator.weight_sync=auto) instead of failing."""
        self.learners, self.generators, self.transport = learners, generators, transport
        if transport == "shared_memory":
            try:
                self._share()
            except (SharedMemoryTooSmall, NotColocated) as err:
                if not fallback:
                    raise
                log(f"weights by object_store: {err}")
                self.transport = "object_store"
        elif transport in WEIGHT_TRANSFER_TRANSPORTS:
            address, port = learners.rendezvous()
            world_size = 1 + len(generators.actors) * tensor_parallel_size
            client = EnginesClient(generators.actors, tensor_parallel_size)
            ray.get(
                [a.init_weight_transfer.remote(transport, address, port, world_size, client) for a in learners.actors]
            )
        elif transport != "object_store":
            raise ValueError(
                f"generator.weight_sync must be object_store, shared_memory or one of "
                f"{WEIGHT_TRANSFER_TRANSPORTS}, got {transport!r}"
            )

    def _share(self) -> None:
        """Map the learner's shared memory into every engine (all on rank 0's node), then drop its path."""
        rank0 = self.learners.actors[0]
        home = ray.get(rank0.node_id.remote())
        away = [
            i for i, node in enumerate(ray.get([a.node_id.remote() for a in self.generators.actors])) if node != home
        ]
        if away:
            raise NotColocated(
                f"generator engine(s) {away} are not on learner rank 0's node, so they cannot map its "
                f"memory: place them together (cluster.generator / cluster.learner resources) or set "
                f"generator.weight_sync=object_store"
            )
        layout = ray.get(rank0.share_weights.remote())
        try:
            ray.get([a.attach_shared_weights.remote(layout) for a in self.generators.actors])
        finally:
            ray.get(rank0.unlink_shared_weights.remote())

    def push(self, version: int) -> None:
        """Every engine holds the learner's current weights as `version` when this returns. No
        sampling starts meanwhile: sampling in flight finishes on the old weights, then the update runs."""
        with self.generators.paused():
            if self.transport == "object_store":
                self.generators.load_weights(self.learners.named_weights(), version)
            elif self.transport == "shared_memory":
                ray.get([a.write_shared_weights.remote() for a in self.learners.actors])
                self.generators.load_shared_weights(version)
            else:
                ray.get([a.send_weights.remote() for a in self.learners.actors])
                self.generators.weights_loaded(version)
