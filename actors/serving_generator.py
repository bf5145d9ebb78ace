"""ServingGeneratorActor: the served Conductor's plan sampler, vLLM's
asynchronous engine (conductor_rl/policy/async_sampling.py) as an async Ray
actor. Each `sample` call is one request that joins the engine's running
batch and returns its plan as soon as that plan is finished (continuous
batching), so a served request never waits for a batch window or for other
requests' longer plans.

Training keeps `GeneratorActor` (the offline engine, whole batches, weight
loads); this actor holds fixed weights for the server's life.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import ray

from conductor_rl.models import quiet_model_libraries, resolve_model
from conductor_rl.plan.shape import PlanShape
from conductor_rl.policy.sampling import Sample

# An async actor runs this many calls at once; each is a request in the engine's batch, which
# vLLM's scheduler bounds by its own limits (max_num_seqs, the KV cache), queueing the rest.
MAX_CONCURRENT_REQUESTS = 1024


@ray.remote(max_concurrency=MAX_CONCURRENT_REQUESTS)
class ServingGeneratorActor:
    def __init__(self, model: str, seed: int = 0, max_model_len: int = 4096, dtype: str = "auto") -> None:
        quiet_model_libraries()  # before vLLM is imported: it reads its log level once
        from conductor_rl.policy.async_sampling import AsyncVLLMSampler

        self.sampler = AsyncVLLMSampler(resolve_model(model), seed=seed, max_model_len=max_model_len, dtype=dtype)

    async def ready(self) -> bool:
        return True

    async def sample(
        self,
        prompt_ids: list[int],
        shape: PlanShape | None,
        seed: int,
        temperature: float,
        max_tokens: int,
        top_p: float = 1.0,
    ) -> Sample:
        return await self.sampler.sample_one(prompt_ids, temperature, max_tokens, top_p, seed, shape)

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def shutdown(self) -> None:
        self.sampler.shutdown()


class ServingGenerators:
    """Several ServingGeneratorActors as one: each request goes to the next engine in turn."""

    def __init__(self, actors: Sequence[Any]) -> None:
        self.actors = list(actors)
        # Per process (each Serve replica has its own): engines are equal, so turns need no coordination.
        self._turn = itertools.cycle(range(len(self.actors)))

    @classmethod
    def start(
        cls, model: str, engines: int, options: dict[str, Any], seed: int, max_model_len: int, dtype: str
    ) -> ServingGenerators:
        """`engines` actors with Ray actor `options` each, returned once every engine is up."""
        actors = [
            ServingGeneratorActor.options(**options).remote(model, seed + i, max_model_len, dtype)
            for i in range(engines)
        ]
        pool = cls(actors)
        try:
            ray.get([a.ready.remote() for a in actors])
        except BaseException:
            pool.shutdown()
            raise
        return pool

    async def sample(
        self,
        prompt_ids: list[int],
        shape: PlanShape | None,
        seed: int,
        temperature: float,
        max_tokens: int,
        top_p: float,
    ) -> Sample:
        actor = self.actors[next(self._turn)]
        return await actor.sample.remote(prompt_ids, shape, seed, temperature, max_tokens, top_p)

    def shutdown(self) -> None:
        for actor in self.actors:
            try:
                ray.get(actor.shutdown.remote(), timeout=30)  # the engine core's own process first
            except Exception:  # noqa: BLE001 - an engine already gone is stopped all the same
                pass
            ray.kill(actor)
