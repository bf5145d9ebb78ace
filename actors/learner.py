"""LearnerActor: one DeepSpeed rank as a Ray actor; LearnerGroup: all ranks,
placed together by a placement group, driven as one learner."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

import ray
import torch
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from conductor_rl.config import LearnerConfig
from conductor_rl.models import quiet_model_libraries
from conductor_rl.policy.learner import PolicyLearner, RolloutBatch, StepStats, init_process_group
from conductor_rl.policy.shared_weights import SharedWeightsWriter, WeightsLayout, layout_for

if TYPE_CHECKING:
    from vllm.distributed.weight_transfer.base import TrainerWeightTransferEngine

    from actors.weight_sync import EnginesClient


@ray.remote
class LearnerActor:
    def __init__(self, rank: int, world_size: int, master_addr: str, master_port: int) -> None:
        import os

        quiet_model_libraries()
        os.environ.update(
            MASTER_ADDR=master_addr,
            MASTER_PORT=str(master_port),
            RANK=str(rank),
            WORLD_SIZE=str(world_size),
            LOCAL_RANK="0",
        )
        init_process_group()
        self.rank = rank
        self.learner: PolicyLearner | None = None
        self.transfer: TrainerWeightTransferEngine | None = None
        self.shared: SharedWeightsWriter | None = None

    def build(self, model: str, config: LearnerConfig, total_steps: int, past_versions: int = 0) -> None:
        self.learner = PolicyLearner(model, config, total_steps, past_versions)

    def train_step(self, batch: RolloutBatch, epochs: int = 1) -> StepStats:
        return self._ready().train_step(batch, epochs)

    def named_weights(self) -> list[tuple[str, torch.Tensor]]:
        return self._ready().named_weights()

    def init_weight_transfer(
        self, transport: str, address: str, port: int, world_size: int, client: EnginesClient
    ) -> None:
        """Join the generators' weight-transfer group (conductor_rl/policy/weight_transfer.py)."""
        from conductor_rl.policy.weight_transfer import trainer_engine

        self.transfer = trainer_engine(
            transport, address, port, world_size, self.rank, client, self._ready().engine.module
        )

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def share_weights(self) -> WeightsLayout | None:
        """Rank 0: map new shared memory for the weights (conductor_rl/policy/shared_weights.py) and
        return its layout; other ranks None."""
        if self.rank != 0:
            return None
        from conductor_rl.policy.weight_transfer import ModelWeights

        meta = ModelWeights(self._ready().engine.module).metadata()
        self.shared = SharedWeightsWriter(layout_for((m.name, m.dtype, m.shape) for m in meta))
        return self.shared.layout

    def write_shared_weights(self) -> None:
        """Copy the weights into the shared memory (every rank calls it: ZeRO-3 gathers; rank 0 writes)."""
        from conductor_rl.policy.weight_transfer import ModelWeights

        tensors = iter(ModelWeights(self._ready().engine.module))
        if self.shared is None:
            for _ in tensors:
                pass
        else:
            self.shared.write(tensors)

    def unlink_shared_weights(self) -> None:
        """Every engine has mapped the memory: its path can go (the mappings stay)."""
        if self.shared is not None:
            self.shared.unlink()

    def send_weights(self) -> None:
        if self.transfer is None:
            raise RuntimeError("LearnerActor.init_weight_transfer() must run before send_weights()")
        self.transfer.send_weights()

    def parameter_checksum(self) -> float:
        """A cheap fingerprint of the weights, to check ranks agree."""
        return float(
            sum(p.detach().double().sum() * (i + 1) for i, p in enumerate(self._ready().engine.module.parameters()))
        )

    def save(self, folder: str) -> str:
        return str(self._ready().save(folder))

    def load(self, folder: str) -> None:
        self._ready().load(folder)

    def _ready(self) -> PolicyLearner:
        if self.learner is None:
            raise RuntimeError("LearnerActor.build() must run before training")
        return self.learner


class LearnerGroup:
    """`world_size` LearnerActors in one placement group (PACK: same node when
    it fits), joined into one torch.distributed group."""

    def __init__(
        self,
        model: str,
        config: LearnerConfig,
        total_steps: int,
        resources_per_rank: dict[str, float] | None = None,
        past_versions: int = 0,
    ) -> None:
        """`past_versions`: steps whose weights each rank keeps to recompute stale rows' behaviour
        log-probs (conductor_rl/policy/learner.py)."""
        self.zero3 = config.zero_stage == 3
        bundle = resources_per_rank or ({"GPU": 1, "CPU": 1} if torch.cuda.is_available() else {"CPU": 1})
        self.placement = placement_group([dict(bundle)] * config.world_size, strategy="PACK")
        try:
            ray.get(self.placement.ready(), timeout=600)
        except ray.exceptions.GetTimeoutError:
            ray.util.remove_placement_group(self.placement)
            raise RuntimeError(
                f"the cluster could not place {config.world_size} learner rank(s) of {bundle} within 600 s "
                f"(`ray status` shows what is free): lower learner.world_size, change cluster.learner, "
                f"or add nodes"
            ) from None
        # Rank 0 listens for the others: its node's address and a port free there, not the driver's.
        master_addr, master_port = self.rendezvous()
        self.actors = [
            LearnerActor.options(
                num_cpus=bundle.get("CPU", 0),
                num_gpus=bundle.get("GPU", 0),
                scheduling_strategy=PlacementGroupSchedulingStrategy(self.placement, placement_group_bundle_index=r),
            ).remote(r, config.world_size, master_addr, master_port)
            for r in range(config.world_size)
        ]
        ray.get([a.build.remote(model, config, total_steps, past_versions) for a in self.actors])

    def rebuild(self, model: str, config: LearnerConfig, total_steps: int, past_versions: int = 0) -> None:
        """Build every rank's learner again (model loaded, new engine, optimizer and schedule) in the
        ranks already running, as a new group of the same world size would; skips the ranks' start."""
        if config.world_size != len(self.actors):
            raise ValueError(
                f"a group of {len(self.actors)} rank(s) cannot be rebuilt for world_size={config.world_size}"
            )
        self.zero3 = config.zero_stage == 3
        ray.get([a.build.remote(model, config, total_steps, past_versions) for a in self.actors])

    def train_step(self, batch: RolloutBatch, epochs: int = 1) -> StepStats:
        """Every rank steps `epochs` times on the same batch; rank 0's statistics come back."""
        return ray.get([a.train_step.remote(batch, epochs) for a in self.actors])[0]

    def named_weights(self) -> ray.ObjectRef:
        """An object ref to rank 0's weights, to hand to generators without a driver copy."""
        ranks = self.actors if self.zero3 else self.actors[:1]  # ZeRO-3 gathers: every rank takes part
        return [a.named_weights.remote() for a in ranks][0]  # noqa: RUF015 (every rank must be called: ZeRO-3 gathers)

    def checksums(self) -> list[float]:
        return ray.get([a.parameter_checksum.remote() for a in self.actors])

    def save(self, folder: str) -> str:
        return ray.get([a.save.remote(folder) for a in self.actors])[0]

    def load(self, folder: str) -> None:
        ray.get([a.load.remote(folder) for a in self.actors])

    def shutdown(self) -> None:
        for actor in self.actors:
            ray.kill(actor)
        ray.util.remove_placement_group(self.placement)

    def rendezvous(self) -> tuple[str, int]:
        """An address and a free port on rank 0's node (where a transfer group's store listens)."""
        return ray.get(
            _rendezvous.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(self.placement, placement_group_bundle_index=0),
                num_cpus=0,
            ).remote()
        )


@ray.remote
def _rendezvous() -> tuple[str, int]:
    """Run on rank 0's node: its address and a port free on it."""
    with socket.socket() as s:
        s.bind(("", 0))
        return ray.util.get_node_ip_address(), s.getsockname()[1]
