"""GeneratorActor: a policy sampler (vLLM, or transformers where vLLM cannot
run) as a Ray actor. It samples G completions per prompt with their
log-probabilities, holds a weights version, and refuses to sample with stale
weights when the trainer demands fresh ones."""

from __future__ import annotations

from typing import Any, Literal

import ray
import torch

from conductor_rl.models import load_causal_lm, resolve_model
from conductor_rl.sampling import Sample, StaleWeightsError, TransformersSampler, VLLMSampler


@ray.remote
class GeneratorActor:
    def __init__(self, model: str, backend: Literal["vllm", "transformers"] = "vllm", seed: int = 0,
                 max_model_len: int = 4096, tensor_parallel_size: int = 1) -> None:
        if backend == "vllm":
            self.sampler: Any = VLLMSampler(resolve_model(model), seed=seed, max_model_len=max_model_len,
                                            tensor_parallel_size=tensor_parallel_size)
        elif backend == "transformers":
            self.sampler = TransformersSampler(*load_causal_lm(model, "float32"))
        else:
            raise ValueError(f"backend must be 'vllm' or 'transformers', got {backend!r}")
        self.backend = backend

    def weights_version(self) -> int:
        return self.sampler.weights_version

    def sample(self, prompts: list[str], n: int, temperature: float, max_tokens: int, top_p: float = 1.0,
               seed: int | None = None, min_version: int | None = None) -> list[list[Sample]]:
        """`min_version`: refuse (StaleWeightsError) unless the held weights are at least this new."""
        if min_version is not None and self.sampler.weights_version < min_version:
            raise StaleWeightsError(
                f"generator holds weights version {self.sampler.weights_version}, the trainer requires "
                f"{min_version}: sync weights (load_weights) before sampling"
            )
        return self.sampler.sample(prompts, n, temperature, max_tokens, top_p=top_p, seed=seed)

    def load_weights(self, named_tensors: list[tuple[str, torch.Tensor]], version: int) -> int:
        self.sampler.load_weights(named_tensors, version)
        return version
