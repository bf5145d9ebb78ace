"""Learner -> vLLM weight transfer over a collective, through vLLM's own
weight-transfer API (`vllm.distributed.weight_transfer`).

The trainer's rank 0 and every vLLM worker join one process group; a sync is
vLLM's round trip: `start_weight_update` on the engines, their
`update_weights` receiving while the trainer broadcasts, `finish_weight_update`.
On GPUs the backend is vLLM's own "nccl" (or "ipc": CUDA IPC handles, when
the learner and the engines share GPUs). On CPUs it is "gloo", defined here
and registered in vLLM's two engine factories, so the same handshake and
lifecycle run (and are tested) on a machine without a GPU; only the wire
differs.

The other sync path, `object_store` (the weights travel through Ray's object
store into `collective_rpc("reload_weights")`), needs none of this.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import torch
from vllm.distributed.weight_transfer.base import (
    ParamMeta,
    TrainerInitInfo,
    TrainerWeightTransferEngine,
    WeightSource,
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)

from conductor_rl.policy.learner import full_parameters

TRANSPORTS = ("nccl", "ipc", "gloo")
TIMEOUT = datetime.timedelta(minutes=10)  # a peer that never arrives fails the sync instead of hanging it


@dataclass(kw_only=True)
class GlooInitInfo(WeightTransferInitInfo):
    """What a vLLM worker needs to join the trainer's gloo group."""

    master_address: str
    master_port: int
    rank_offset: int  # this engine's first rank; its tensor-parallel workers follow
    world_size: int


@dataclass
class GlooUpdateInfo(WeightTransferUpdateInfo):
    """One round: the tensors the trainer will broadcast, in order."""

    names: list[str]
    dtype_names: list[str]
    shapes: list[list[int]]


@dataclass
class GlooTrainerInitInfo(TrainerInitInfo):
    backend: ClassVar[str] = "gloo"

    master_address: str
    master_port: int
    world_size: int  # the trainer's rank 0 plus every vLLM worker


def gloo_group(address: str, port: int, rank: int, world_size: int) -> Any:
    """A gloo process group apart from torch.distributed's default one (the
    learner's DeepSpeed group lives there). Rank 0 hosts the rendezvous store."""
    store = torch.distributed.TCPStore(address, port, world_size, is_master=rank == 0, timeout=TIMEOUT)
    return torch.distributed.ProcessGroupGloo(store, rank, world_size, TIMEOUT)


def broadcast(group: Any, tensor: torch.Tensor) -> None:
    group.broadcast(tensor, 0).wait()


class GlooWeightTransferEngine(WeightTransferEngine[GlooInitInfo, GlooUpdateInfo]):
    """vLLM-worker side: receive each tensor from the trainer's broadcast and
    load it inside vLLM's layer-wise reload (as its NCCL engine does)."""

    init_info_cls = GlooInitInfo
    update_info_cls = GlooUpdateInfo

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.group: Any = None

    def init_transfer_engine(self, init_info: GlooInitInfo) -> None:
        rank = init_info.rank_offset + self.parallel_config.rank
        self.group = gloo_group(init_info.master_address, init_info.master_port, rank, init_info.world_size)

    def start_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        initialize_layerwise_reload(self.model)

    def finish_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        finalize_layerwise_reload(self.model, self.model_config)

    def update_weights(self, update_info: dict[str, Any]) -> None:
        # The base class ends with torch.accelerator.synchronize(), which fails without one.
        self.receive_weights(self.parse_update_info(update_info))

    def receive_weights(self, update_info: GlooUpdateInfo) -> None:
        if self.group is None:
            raise RuntimeError("gloo weight transfer is not initialised: call init_weight_transfer_engine first")
        for name, dtype_name, shape in zip(update_info.names, update_info.dtype_names, update_info.shapes):
            tensor = torch.empty(shape, dtype=getattr(torch, dtype_name))
            broadcast(self.group, tensor)
            self.model.load_weights([(name, tensor)])

    def shutdown(self) -> None:
        self.group = None


class GlooTrainerWeightTransferEngine(TrainerWeightTransferEngine[GlooTrainerInitInfo]):
    """Trainer side: rank 0 broadcasts `source` while the engines receive;
    other trainer ranks only iterate the source (it may gather, a collective)."""

    init_info_cls = GlooTrainerInitInfo

    @classmethod
    def trainer_init(
        cls, init_info: GlooTrainerInitInfo, *, client: Any, source: WeightSource | None = None
    ) -> GlooTrainerWeightTransferEngine:
        if source is None:
            raise ValueError("the gloo weight transfer needs a WeightSource")
        engine = cls(client=client, source=source, is_sender=init_info.is_sender)
        engine.group = None
        if engine.is_sender:
            worker_info = GlooInitInfo(
                master_address=init_info.master_address,
                master_port=init_info.master_port,
                rank_offset=1,
                world_size=init_info.world_size,
            )
            # The engines block in the rendezvous until the trainer joins it too.
            with ThreadPoolExecutor(max_workers=1) as pool:
                joined = pool.submit(client.init_weight_transfer_engine, asdict(worker_info))
                engine.group = gloo_group(init_info.master_address, init_info.master_port, 0, init_info.world_size)
                joined.result()
        return engine

    def send_weights(self) -> None:
        assert self.source is not None
        meta = self.source.metadata()
        if not self.is_sender:
            for _ in self.source:
                pass
            return
        info = GlooUpdateInfo(
            [m.name for m in meta], [str(m.dtype).removeprefix("torch.") for m in meta], [list(m.shape) for m in meta]
        )
        self.client.start_weight_update()
        pool = ThreadPoolExecutor(max_workers=1)
        try:
            received = pool.submit(self.client.update_weights, asdict(info))
            for (name, tensor), m in zip(self.source, meta, strict=True):
                if name != m.name or tuple(tensor.shape) != m.shape:
                    raise ValueError(f"weight source yielded {name} {tuple(tensor.shape)}, declared {m.name} {m.shape}")
                broadcast(self.group, tensor.detach().to("cpu").contiguous())
            received.result()
        finally:
            # Not waiting: after a failed broadcast the engines sit in theirs until the group's timeout.
            pool.shutdown(wait=False)
        self.client.finish_weight_update()

    def shutdown(self) -> None:
        self.group = None


class ModelWeights(WeightSource):
    """A learner module's parameters by Hugging Face name, as vLLM's
    `load_weights` takes them (conductor_rl.policy.learner.full_parameters: tied
    ones under each name, ZeRO-3 slices gathered while sent)."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module

    def metadata(self) -> list[ParamMeta]:
        return [
            ParamMeta(name, p.dtype, tuple(getattr(p, "ds_shape", p.shape)))
            for name, p in self.module.named_parameters(remove_duplicate=False)
        ]

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        return full_parameters(self.module)


def register_gloo_backend() -> None:
    """Make "gloo" a backend of vLLM's weight-transfer factories (idempotent).
    Must run in the vLLM worker's process before the engine is built, and in
    the trainer's before `trainer_init`."""
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory, WeightTransferTrainerFactory

    for factory, engine in (
        (WeightTransferEngineFactory, GlooWeightTransferEngine),
        (WeightTransferTrainerFactory, GlooTrainerWeightTransferEngine),
    ):
        try:
            factory.register_engine("gloo", engine)
        except ValueError:  # already registered in this process
            pass


def trainer_engine(
    transport: str, address: str, port: int, world_size: int, rank: int, client: Any, module: torch.nn.Module
) -> TrainerWeightTransferEngine:
    """Join the engines' transfer group (rank 0 drives the handshake through
    `client`) and return the engine whose `send_weights()` pushes `module`.
    Every learner rank calls it, and later `send_weights`, in step."""
    from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory

    register_gloo_backend()
    info = trainer_init_info(transport, address, port, world_size, rank)
    return WeightTransferTrainerFactory.trainer_init(info, client=client, source=ModelWeights(module))


def trainer_init_info(transport: str, address: str, port: int, world_size: int, rank: int) -> TrainerInitInfo:
    """The trainer-side init info of `transport` for learner rank `rank` (rank 0 sends)."""
    if transport == "nccl":
        from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo

        return NCCLTrainerInitInfo(master_address=address, master_port=port, world_size=world_size, rank=rank)
    if transport == "ipc":
        from vllm.distributed.weight_transfer.ipc_engine import IPCTrainerInitInfo

        return IPCTrainerInitInfo(rank=rank)  # no rendezvous: the engines open the learner's CUDA memory
    if transport == "gloo":
        return GlooTrainerInitInfo(master_address=address, master_port=port, world_size=world_size, rank=rank)
    raise ValueError(f"weight transfer must be one of {TRANSPORTS}, got {transport!r}")
