"""A policy sampler on vLLM's asynchronous engine (`AsyncLLM`), for serving:
one prompt per call, each call's request joining the engine's running batch
(continuous batching) and returning as soon as its own completion finishes.

`VLLMSampler` (conductor_rl/policy/sampling.py) samples whole batches on the
offline `LLM`: a batch starts when the last prompt of it is there and returns
when its slowest completion ends, which is what training wants (one batch per
iteration) and what a server does not (a request that arrives while a batch
runs waits for all of it). This sampler takes the same engine arguments on
this hardware (`engine_options`: eager mode and unchunked prefill on CPU, the
KV cache sized by `kv_cache_gb`), the same plan constraint (one regex per plan
shape) and the same per-request seed, so a served plan is the one the batch
path samples for the same prompt and seed, up to floating-point differences
between batch compositions.

It has no `load_weights`: a served Conductor's weights are fixed for the
server's life. The engine core runs in a child process (`AsyncLLM` always
does), so the caller's event loop stays free while the model steps.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from typing import Any

import torch

from conductor_rl.plan.shape import PlanShape
from conductor_rl.policy.precision import engine_dtype
from conductor_rl.policy.sampling import Sample, engine_options, plan_structured_outputs, vllm_sample


class AsyncVLLMSampler:
    """One vLLM `AsyncLLM` engine; `sample_one` is a coroutine, many of them share the engine's batch."""

    def __init__(
        self,
        model_path: str,
        *,
        seed: int = 0,
        dtype: str = "auto",
        max_model_len: int = 4096,
        tensor_parallel_size: int = 1,
        kv_cache_gb: int = 1,
        gpu_memory_utilization: float = 0.8,
        weights_version: int = 0,
    ) -> None:
        on_cpu = not torch.cuda.is_available()
        if on_cpu:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gb))
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        self.engine = AsyncLLM.from_engine_args(
            AsyncEngineArgs(
                model=model_path,
                seed=seed,
                dtype=engine_dtype(dtype, on_cpu),
                max_model_len=max_model_len,
                tensor_parallel_size=tensor_parallel_size,
                gpu_memory_utilization=gpu_memory_utilization,
                disable_log_stats=True,
                **engine_options(on_cpu, max_model_len),
            )
        )
        self.weights_version = weights_version
        self._ids = itertools.count()

    async def sample_one(
        self,
        prompt_ids: Sequence[int],
        temperature: float,
        max_tokens: int,
        top_p: float = 1.0,
        seed: int | None = None,
        shape: PlanShape | None = None,
    ) -> Sample:
        """One completion of `prompt_ids` (token ids: what the learner would see), with its log-probs."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        params = SamplingParams(
            n=1,
            temperature=temperature,
            top_p=top_p,
            max_tokens=max_tokens,
            logprobs=0,
            seed=seed,
            skip_special_tokens=True,
            structured_outputs=plan_structured_outputs(shape),
            # Only the finished completion comes back: no per-token output to detokenize and ship.
            output_kind=RequestOutputKind.FINAL_ONLY,
        )
        final: Any = None
        async for output in self.engine.generate(
            {"prompt_token_ids": list(prompt_ids)}, params, f"plan-{next(self._ids)}"
        ):
            final = output
        if final is None or not final.outputs:
            raise RuntimeError("vLLM's engine ended a request without an output")
        return vllm_sample(final.outputs[0], self.weights_version)

    def shutdown(self) -> None:
        """Stop the engine core's process."""
        self.engine.shutdown()
