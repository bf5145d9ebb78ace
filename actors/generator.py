"""GeneratorActor: a policy sampler (vLLM, or transformers where vLLM cannot
run) as a Ray actor. It samples G completions per prompt with their
log-probabilities, holds a weights version, and refuses to sample with stale
weights when the trainer demands fresh ones."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import ray
import torch

from conductor_rl.config import GeneratorConfig
from conductor_rl.models import load_causal_lm, quiet_model_libraries, resolve_model
from conductor_rl.plan.shape import Shapes, shape_per_prompt
from conductor_rl.policy.sampling import Sample, StaleWeightsError, TransformersSampler, VLLMSampler
from conductor_rl.policy.shared_weights import SharedWeightsReader, WeightsLayout


@ray.remote
class GeneratorActor:
    def __init__(
        self,
        model: str,
        backend: Literal["vllm", "transformers"] = "vllm",
        seed: int = 0,
        max_model_len: int = 4096,
        tensor_parallel_size: int = 1,
        weights_version: int = 0,
        dtype: str = "auto",
        weight_transfer: str | None = None,
    ) -> None:
        """`weights_version`: the version of the weights `model` holds (a checkpoint's, on resume).
        `weight_transfer`: "nccl", "ipc" or "gloo" to receive weights by vLLM's weight-transfer API."""
        quiet_model_libraries()  # before vLLM is imported: it reads its log level once
        if backend == "vllm":
            self.sampler: Any = VLLMSampler(
                resolve_model(model),
                seed=seed,
                max_model_len=max_model_len,
                tensor_parallel_size=tensor_parallel_size,
                dtype=dtype,
                weight_transfer=weight_transfer,
            )
        elif backend == "transformers":
            self.sampler = TransformersSampler(*load_causal_lm(model, "float32"))
        else:
            raise ValueError(f"backend must be 'vllm' or 'transformers', got {backend!r}")
        self.sampler.weights_version = weights_version
        self.backend = backend
        self.shared: SharedWeightsReader | None = None

    def weights_version(self) -> int:
        return self.sampler.weights_version

    def sample(
        self,
        prompts: list[Any],
        n: int,
        temperature: float,
        max_tokens: int,
        top_p: float = 1.0,
        seed: int | list[int] | None = None,
        min_version: int | None = None,
        shape: Shapes = None,
    ) -> list[list[Sample]]:
        """`min_version`: refuse (StaleWeightsError) unless the held weights are at least this new."""
        if min_version is not None and self.sampler.weights_version < min_version:
            raise StaleWeightsError(
                f"generator holds weights version {self.sampler.weights_version}, the trainer requires "
                f"{min_version}: sync weights (load_weights) before sampling"
            )
        return self.sampler.sample(prompts, n, temperature, max_tokens, top_p=top_p, seed=seed, shape=shape)

    def load_weights(self, named_tensors: list[tuple[str, torch.Tensor]], version: int) -> int:
        self.sampler.load_weights(named_tensors, version)
        return version

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    # Weights through shared memory with the learner on this node (actors/weight_sync.py drives it).
    def attach_shared_weights(self, layout: WeightsLayout) -> None:
        self.shared = SharedWeightsReader(layout)

    def load_shared_weights(self, version: int) -> int:
        if self.shared is None:
            raise RuntimeError("GeneratorActor.attach_shared_weights() must run before load_shared_weights()")
        self.sampler.load_weights(self.shared.tensors(), version)
        return version

    # vLLM's weight-transfer control plane (actors/weight_sync.py drives it).
    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self.sampler.llm.init_weight_transfer_engine({"init_info": init_info})

    def start_weight_update(self) -> None:
        self.sampler.weights_version = -1  # half-loaded weights are no version: fresh-weight sampling refuses
        self.sampler.llm.start_weight_update()

    def update_weights(self, update_info: dict[str, Any]) -> None:
        self.sampler.llm.update_weights({"update_info": update_info})

    def finish_weight_update(self) -> None:
        self.sampler.llm.finish_weight_update()

    def update_weight_version(self, version: int) -> int:
        self.sampler.weights_loaded(version)
        return version


class GeneratorPool:
    """Several GeneratorActors used as one: prompts are split across engines,
    new weights go to every engine (one object ref, fetched once per node).

    Safe to share between threads (asynchronous training samples in one while
    the learner syncs weights in another): a weight update holds `paused()`,
    and no sampling is submitted meanwhile. Sampling already on an engine
    finishes first (an actor runs one call at a time), with the old weights:
    no request is dropped, and each sample records its weights version."""

    def __init__(
        self,
        model: str,
        config: GeneratorConfig,
        seed: int = 0,
        resources: dict[str, Any] | None = None,
        weights_version: int = 0,
        weight_transfer: str | None = None,
    ) -> None:
        """`config` is a conductor_rl.config.GeneratorConfig; `resources`: Ray actor options per engine;
        `weight_transfer`: "nccl", "ipc" or "gloo" to ready the engines for actors/weight_sync.py's transfer."""
        per_engine = resources or (
            {"num_gpus": config.tensor_parallel_size} if torch.cuda.is_available() else {"num_cpus": 1}
        )
        self.require_fresh = config.require_fresh_weights
        self.version = weights_version
        self._updating = threading.Lock()
        self.actors = [
            GeneratorActor.options(**per_engine).remote(
                model,
                config.backend,
                seed + i,
                config.max_model_len,
                config.tensor_parallel_size,
                weights_version,
                config.dtype,
                weight_transfer,
            )
            for i in range(config.engines)
        ]
        ray.get([a.weights_version.remote() for a in self.actors])  # wait until every engine is up

    @classmethod
    def of(cls, actors: Sequence[Any], weights_version: int = 0) -> GeneratorPool:
        """A pool over engines another process started (a served Conductor's replicas share them)."""
        pool = cls.__new__(cls)
        pool.require_fresh, pool.version, pool._updating = False, weights_version, threading.Lock()
        pool.actors = list(actors)
        return pool

    def sample(
        self,
        prompts: list[Any],
        n: int,
        temperature: float,
        max_tokens: int,
        top_p: float = 1.0,
        seed: int | Sequence[int] | None = None,
        shape: Shapes = None,
    ) -> list[list[Sample]]:
        """G samples for each prompt (text or token ids), in prompt order; `shape`: one, or one per prompt;
        `seed`: one (each engine derives its prompts' seeds from it), or one per prompt."""
        shares = [list(range(i, len(prompts), len(self.actors))) for i in range(len(self.actors))]
        shapes = shape_per_prompt(shape, len(prompts))

        def engine_seed(i: int, share: list[int]) -> int | list[int] | None:
            if seed is None or isinstance(seed, int):
                return None if seed is None else seed + i
            return [seed[j] for j in share]

        with self._updating:
            min_version = self.version if self.require_fresh else None
            refs = [
                actor.sample.remote(
                    [prompts[j] for j in share],
                    n,
                    temperature,
                    max_tokens,
                    top_p,
                    engine_seed(i, share),
                    min_version,
                    [shapes[j] for j in share],
                )
                for i, (actor, share) in enumerate(zip(self.actors, shares))
                if share
            ]
        results: list[list[Sample]] = [[] for _ in prompts]
        for share, groups in zip([s for s in shares if s], ray.get(refs)):
            for j, group in zip(share, groups):
                results[j] = group
        return results

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No sampling is submitted while this is held (WeightSync holds it for a whole update)."""
        with self._updating:
            yield

    def load_weights(self, named_tensors: list[tuple[str, torch.Tensor]] | ray.ObjectRef, version: int) -> None:
        """`named_tensors`: a list or an object ref to one (e.g. LearnerGroup.named_weights())."""
        ray.get([a.load_weights.remote(named_tensors, version) for a in self.actors])
        self.version = version

    def load_shared_weights(self, version: int) -> None:
        """Every engine loads the weights the learner wrote into their shared memory, as `version`."""
        ray.get([a.load_shared_weights.remote(version) for a in self.actors])
        self.version = version

    def weights_loaded(self, version: int) -> None:
        """Every engine received `version` by a weight transfer."""
        ray.get([a.update_weight_version.remote(version) for a in self.actors])
        self.version = version

    def shutdown(self) -> None:
        for actor in self.actors:
            ray.kill(actor)
