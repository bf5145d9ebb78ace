"""WeightSync: after each learner step, the learner's weights go into every
generator engine, versioned. Two transports (`generator.weight_sync`):

- `object_store`: learner rank 0 puts its weights in Ray's object store once;
  each engine fetches them and loads them in place (vLLM's
  `collective_rpc("reload_weights")`, or transformers' `load_state_dict`).
  Works with any backend, on any hardware.
- `nccl` / `ipc` / `gloo`: vLLM's weight-transfer API
  (conductor_rl/policy/weight_transfer.py). With nccl and gloo, learner rank 0 and
  every vLLM worker join one process group and the learner broadcasts; NCCL
  keeps the weights on the GPUs, gloo is the same path on CPUs. With ipc the
  engines open the learner's GPU memory (CUDA IPC), for a learner and engines
  that share GPUs.
"""

from __future__ import annotations

from typing import Any

import ray

from conductor_rl.config import WEIGHT_TRANSFER_TRANSPORTS


def resolve_weight_sync(setting: str, backend: str, has_gpus: bool) -> str:
    """`auto`: NCCL when vLLM engines run on GPUs, else the object store."""
    if setting == "auto":
        return "nccl" if has_gpus and backend == "vllm" else "object_store"
    if setting in ("nccl", "ipc") and not has_gpus:
        raise ValueError(f"generator.weight_sync={setting} needs GPUs in the cluster: "
                         f"use gloo or object_store on CPUs")
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

    def __init__(self, actors: list[Any], tensor_parallel_size: int) -> None:
        self.actors, self.tp = actors, tensor_parallel_size

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        def for_engine(i: int) -> dict[str, Any]:   # ipc has no ranks
            return {**init_info, "rank_offset": 1 + i * self.tp} if "rank_offset" in init_info else init_info

        ray.get([a.init_weight_transfer_engine.remote(for_engine(i)) for i, a in enumerate(self.actors)])

    def start_weight_update(self) -> None:
        ray.get([a.start_weight_update.remote() for a in self.actors])

    def update_weights(self, update_info: Any) -> None:
        ray.get([a.update_weights.remote(update_info) for a in self.actors])

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        ray.get([a.finish_weight_update.remote() for a in self.actors])


class WeightSync:
    """Pushes a LearnerGroup's weights into a GeneratorPool by `transport`."""

    def __init__(self, learners: Any, generators: Any, transport: str, tensor_parallel_size: int = 1) -> None:
        self.learners, self.generators, self.transport = learners, generators, transport
        if transport in WEIGHT_TRANSFER_TRANSPORTS:
            address, port = learners.rendezvous()
            world_size = 1 + len(generators.actors) * tensor_parallel_size
            client = EnginesClient(generators.actors, tensor_parallel_size)
            ray.get([a.init_weight_transfer.remote(transport, address, port, world_size, client)
                     for a in learners.actors])
        elif transport != "object_store":
            raise ValueError(f"generator.weight_sync must be object_store or one of {WEIGHT_TRANSFER_TRANSPORTS}, "
                             f"got {transport!r}")

    def push(self, version: int) -> None:
        """Every engine holds the learner's current weights as `version` when this returns. No
        sampling starts meanwhile: sampling in flight finishes on the old weights, then the update runs."""
        with self.generators.paused():
            if self.transport == "object_store":
                self.generators.load_weights(self.learners.named_weights(), version)
            else:
                ray.get([a.send_weights.remote() for a in self.learners.actors])
                self.generators.weights_loaded(version)
