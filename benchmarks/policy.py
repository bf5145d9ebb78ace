"""Policy engines: sampling, learning and weight sync speed.

1. Generation tokens/s with vLLM against the transformers backend, on the same
   prompts and sampling settings (same run).
2. Learner tokens/s for one GRPO step (DeepSpeed rank in a Ray actor).
3. Weight sync: seconds and GB/s per learner -> vLLM sync by each transport
   this machine has (the object store; shared memory; vLLM's weight transfer
   over gloo on a CPU, NCCL between GPUs, CUDA IPC on one GPU), against the
   floor of a plain in-memory copy of the same tensors, and the one `auto`
   picks (goal: within 2x the floor), with the shared-memory sync's parts
   (benchmarks/weight_sync.py, which also runs alone); then vLLM's greedy
   text is checked against transformers on the synced weights.

    python benchmarks/policy.py [--json] [--model smollm2-135m] [--prompts 4] [--samples 8] [--tokens 64]

Runs unchanged on a machine with NVIDIA GPUs (official vllm; NCCL with two or
more GPUs, CUDA IPC with one).
Prints human-readable lines; with --json the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from benchmarks.measure import keep_result
from benchmarks.weight_sync import measure as measure_syncs
from conductor_rl.config import GeneratorConfig, LearnerConfig
from conductor_rl.models import load_causal_lm
from conductor_rl.plan.prompts import ConductorPrompt
from conductor_rl.policy.learner_batch import RolloutBatch
from conductor_rl.policy.precision import engine_dtype
from conductor_rl.policy.sampling import TransformersSampler

QUESTIONS = [
    "What is 17 * 23?",
    "Which planet has the most moons?",
    "Solve for x: 3x + 7 = 22.",
    "Name the capital of Australia.",
    "How many primes are below 50?",
    "What is the derivative of x^3?",
    "Who wrote 'On the Origin of Species'?",
    "Simplify (x^2 - 1) / (x - 1).",
]


def generated_tokens(groups: list) -> int:
    return sum(len(s.token_ids) for group in groups for s in group)


def timed(fn):
    started = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--learner-rows", type=int, default=8)
    parser.add_argument("--syncs", type=int, default=3, help="timed weight syncs per transport (median reported)")
    args = parser.parse_args()

    import ray

    from actors.generator import GeneratorPool
    from actors.learner import LearnerGroup
    from actors.weight_sync import local_transport, resolve_weight_sync

    model, tokenizer = load_causal_lm(args.model, "float32")
    prompt = ConductorPrompt(tokenizer, n_workers=3, n_examples=0)
    prompts = [prompt.text(q) for q in (QUESTIONS * 4)[: args.prompts]]
    collective = local_transport()
    gpus = torch.cuda.device_count()
    # One GPU: the learner and the engine share it (and sync by CUDA IPC).
    engine_resources = {"num_gpus": 0.5 if gpus == 1 else 1} if gpus else {"num_cpus": 1}
    rank_resources = {"GPU": 0.5 if gpus == 1 else 1, "CPU": 1} if gpus else {"CPU": 1}

    # 1. generation: transformers here, then vLLM in a generator actor (as training runs it), same prompts
    hf = TransformersSampler(model, tokenizer)
    hf.sample(prompts[:1], n=1, temperature=1.0, max_tokens=4, seed=0)  # warm-up
    hf_groups, hf_s = timed(lambda: hf.sample(prompts, n=args.samples, temperature=1.0, max_tokens=args.tokens, seed=0))
    hf_tps = generated_tokens(hf_groups) / hf_s
    print(f"transformers: {generated_tokens(hf_groups)} tokens in {hf_s:.1f}s = {hf_tps:.0f} tokens/s", flush=True)

    ray.init(include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    try:
        pool, start_s = timed(
            lambda: GeneratorPool(
                args.model, GeneratorConfig(max_model_len=2048), resources=engine_resources, weight_transfer=collective
            )
        )
        engine = pool.actors[0]
        ray.get(engine.sample.remote(prompts[:1], 1, 1.0, 4, seed=0))  # warm-up
        v_groups, v_s = timed(lambda: ray.get(engine.sample.remote(prompts, args.samples, 1.0, args.tokens, seed=0)))
        v_tps = generated_tokens(v_groups) / v_s
        print(
            f"vLLM: engine start {start_s:.1f}s; {generated_tokens(v_groups)} tokens in {v_s:.1f}s = "
            f"{v_tps:.0f} tokens/s ({v_tps / hf_tps:.1f}x transformers)",
            flush=True,
        )

        # 2. one GRPO learner step, on the vLLM samples
        rows = [(tokenizer(p, add_special_tokens=False).input_ids, s) for p, g in zip(prompts, v_groups) for s in g]
        rows = (rows * (args.learner_rows // max(len(rows), 1) + 1))[: args.learner_rows]
        batch = RolloutBatch(
            [r[0] for r in rows],
            [list(r[1].token_ids) for r in rows],
            [list(r[1].logprobs) for r in rows],
            [(-1.0) ** i for i in range(len(rows))],
        )
        learner, build_s = timed(
            lambda: LearnerGroup(
                args.model, LearnerConfig(micro_batch_size=4), total_steps=10, resources_per_rank=rank_resources
            )
        )
        learner.train_step(batch)  # warm-up (allocations, first backward)
        stats, step_s = timed(lambda: learner.train_step(batch))
        seq_tokens = sum(len(p) + len(c) for p, c in zip(batch.prompt_ids, batch.completion_ids))
        print(
            f"learner: {len(rows)} rollouts, {seq_tokens} tokens ({stats.tokens} completion) in {step_s:.1f}s = "
            f"{seq_tokens / step_s:.0f} tokens/s (build {build_s:.1f}s)",
            flush=True,
        )

        # 3. weight sync learner -> engine by each transport, against a plain in-memory copy of the same tensors
        auto = resolve_weight_sync("auto", "vllm", gpus)  # every engine is on this node here
        sync_figures = measure_syncs(learner, pool, ["object_store", "shared_memory", collective], args.syncs, auto)
        weights = ray.get(learner.named_weights())
        # the engine really holds the learner's weights: greedy text equals transformers' on them
        model.load_state_dict(dict(weights))
        [[greedy]] = ray.get(engine.sample.remote(prompts[:1], 1, 0.0, 16, seed=0))
        [[expected]] = TransformersSampler(model, tokenizer).sample(prompts[:1], n=1, temperature=0.0, max_tokens=16)
        print(
            f"  after the syncs vLLM's greedy text {'equals' if greedy.text == expected.text else 'DIFFERS FROM'} "
            f"transformers'",
            flush=True,
        )
        learner.shutdown()
        pool.shutdown()
    finally:
        ray.shutdown()

    figures = {
        "benchmark": "policy",
        "model": args.model,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"cpu x{os.cpu_count()}",
        "generation": {
            "prompts": len(prompts),
            "samples_per_prompt": args.samples,
            "max_tokens": args.tokens,
            "transformers_tokens_per_s": round(hf_tps, 1),
            "vllm_tokens_per_s": round(v_tps, 1),
            "vllm_engine_start_s": round(start_s, 1),
            "ratio_vllm_over_transformers": round(v_tps / hf_tps, 2),
        },
        "learner": {
            "rollouts": len(rows),
            "tokens": seq_tokens,
            "completion_tokens": stats.tokens,
            "step_s": round(step_s, 2),
            "tokens_per_s": round(seq_tokens / step_s, 1),
        },
        "weight_sync": {
            **sync_figures,
            # the engine's dtype (generator.dtype auto): a bf16 engine's greedy text may part from float32 transformers'
            "engine_dtype": engine_dtype("auto", on_cpu=not gpus),
            "greedy_matches_transformers": greedy.text == expected.text,
        },
    }
    keep_result(figures)
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
