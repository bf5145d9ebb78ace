"""Served workers: how long a vLLM server takes to start, and its tokens/s
against the in-process `local` provider on the same prompts (same run).

1. Start time: SmolLM2-135M served by vLLM's OpenAI-compatible server in a Ray
   actor (actors/served_worker.py), from the actor's creation to a healthy
   server that lists the model.
2. Tokens/s through the worker pool (WorkerActor -> HTTP -> vLLM), the prompts
   one at a time and all at once (what a training iteration does), against
   the `local` provider (transformers in this process, one request at a time:
   it cannot batch) on the same prompts and output budget; ratios to it.
3. The same served figures in vLLM's own process layout on a CPU
   (`VLLM_ENABLE_V1_MULTIPROCESSING=1`: the model in a third process, pinned to
   the cores vLLM does not keep for its server process, one of two here), and
   in that layout with every core (`VLLM_CPU_NUM_OF_RESERVED_CPU=0`). The job's
   default runs the model in the engine process
   (conductor_rl/workers/serving.py, CPU_SERVER_ENV).

4. With --train (alone): the training job on configs/local-real.yaml, one iteration of 2 questions
   x 2 plans (the job serves SmolLM2 and Gemma 3 itself, then generates, executes, grades, learns,
   syncs the weights and saves a checkpoint): each server's start time, the job's wall time, and
   whether every vLLM server ended with the job. Exit 1 when the job fails, a figure is missing or a
   server is left behind (the suite's end-to-end test of this run, moved here: scripts/test.sh).

    python benchmarks/served_worker.py [--json] [--prompts 8] [--tokens 64] [--no-layouts]
    python benchmarks/served_worker.py --train [--json]

Prints human-readable lines; with --json the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.measure import machine, report
from conductor_rl.config import WorkerConfig
from conductor_rl.workers.providers import WorkerRequest, build_provider

QUESTIONS = [
    "What is 17 + 25? Answer with the number.",
    "Name the capital of France.",
    "Which planet is known as the red planet?",
    "What is the opposite of 'cold'?",
    "How many legs does a spider have?",
    "Translate 'thank you' into Spanish.",
    "What gas do plants take in from the air?",
    "Give a synonym of 'happy'.",
    "What is 9 times 8?",
    "Which ocean is the largest?",
    "What is the boiling point of water in Celsius?",
    "Name a primary colour.",
]


def requests(n: int, tokens: int) -> list[WorkerRequest]:
    return [
        WorkerRequest([{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}], max_tokens=tokens, temperature=0.0)
        for i in range(n)
    ]


async def run(worker: Any, batch: list[WorkerRequest], concurrent: bool) -> tuple[int, float]:
    """(output tokens, seconds) for the batch, one at a time or all at once."""
    started = time.perf_counter()
    if concurrent:
        responses = await asyncio.gather(*(worker.complete(r) for r in batch))
    else:
        responses = [await worker.complete(r) for r in batch]
    return sum(r.usage.output_tokens for r in responses), time.perf_counter() - started


def served_figures(label: str, env: dict[str, str], batch: list[WorkerRequest], log: Any) -> dict[str, float]:
    import ray

    from actors.served_worker import ServedWorkers
    from actors.worker_pool import WorkerPool, get_ledger

    worker = WorkerConfig(
        name=f"bench-served-{label}",
        provider="openai_compatible",
        model="smollm2-bench",
        temperature=0.0,
        max_tokens=batch[0].max_tokens,
        concurrency=64,
        timeout_s=600,
        serve={
            "model": "smollm2-135m",
            "cpus": 0.5,
            "start_timeout_s": 900,
            "engine_args": {"dtype": "float32", "enforce_eager": True, "max_model_len": 2048},
            "env": {"VLLM_CPU_KVCACHE_SPACE": "1", **env},
        },
    )
    created = time.perf_counter()
    served = ServedWorkers.start([worker], log=log)
    start_s = time.perf_counter() - created
    try:
        ledger = get_ledger(None, name=f"ledger-bench-{uuid.uuid4().hex[:8]}")
        pool = WorkerPool(worker, 1, ledger=ledger, base_urls=served.urls_for(0), api_key=served.key_for(0))
        asyncio.run(run(pool, batch[:1], False))  # first request: tokenizer and kernels warm
        seq_tokens, seq_s = asyncio.run(run(pool, batch, False))
        par_tokens, par_s = asyncio.run(run(pool, batch, True))
        asyncio.run(pool.aclose())
        ray.kill(ledger)
    finally:
        served.shutdown()
    figures = {
        "start_s": round(start_s, 1),
        "server_start_s": round(served.replicas[0][0]["seconds"], 1),
        "sequential_tokens_per_s": round(seq_tokens / seq_s, 1),
        "concurrent_tokens_per_s": round(par_tokens / par_s, 1),
        "sequential_tokens": seq_tokens,
        "concurrent_tokens": par_tokens,
    }
    log(
        f"served ({label}): started in {start_s:.1f} s; {figures['sequential_tokens_per_s']} tokens/s one at a "
        f"time, {figures['concurrent_tokens_per_s']} tokens/s with {len(batch)} at once"
    )
    return figures


SERVED_LINE = re.compile(r"served (\S+) at http://[\d.]+:(\d+)/v1 in (\d+) s")


def served_servers(stderr: str) -> dict[str, dict[str, int]]:
    """{worker: {"port", "start_s"}} from the job's "served <worker> at <url> in <n> s" lines."""
    return {m[1]: {"port": int(m[2]), "start_s": int(m[3])} for m in SERVED_LINE.finditer(stderr)}


def vllm_servers_on(ports: list[int]) -> list[int]:
    """Pids of vLLM server processes still listening on one of `ports`."""
    left = []
    for entry in os.listdir("/proc"):
        try:
            command = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode() + " "
        except OSError:
            continue
        if entry.isdigit() and "vllm.entrypoints" in command and any(f"--port {p} " in command for p in ports):
            left.append(int(entry))
    return left


def train_run(log: Any) -> tuple[dict[str, Any], list[str]]:
    """The job on configs/local-real.yaml for one iteration: (its figures, what went wrong)."""
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="served-train-") as folder:
        out = Path(folder) / "run"
        command = [
            sys.executable, "-m", "jobs.train", "--config", "configs/local-real.yaml", "train.iterations=1",
            f"train.output_dir={out}", "train.progress=false", "train.report=false", "train.rollouts_per_question=2",
        ]  # fmt: skip
        log("training one iteration of configs/local-real.yaml (its served workers started by the job) ...")
        started = time.perf_counter()
        proc = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=1500)
        figures: dict[str, Any] = {"job_s": round(time.perf_counter() - started, 1), "exit_code": proc.returncode}
        servers = served_servers(proc.stderr)
        figures["served"] = {name: info["start_s"] for name, info in servers.items()}
        records = (out / "metrics.jsonl").read_text().splitlines() if (out / "metrics.jsonl").exists() else []
        figures["iterations_logged"] = len(records)
        figures["checkpoint"] = (out / "checkpoints" / "ckpt-000000" / "state.json").is_file()
        left = vllm_servers_on([info["port"] for info in servers.values()])
        figures["servers_left"] = len(left)
    problems = []
    if proc.returncode != 0:
        problems.append(f"the job exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    if set(servers) != {"smollm2-precise", "gemma3-270m-base"}:
        problems.append(f"served workers logged: {sorted(servers)}; expected smollm2-precise and gemma3-270m-base")
    if figures["iterations_logged"] != 1 or not figures["checkpoint"]:
        problems.append(f"{figures['iterations_logged']} iteration(s) logged, checkpoint {figures['checkpoint']}")
    if left:
        problems.append(f"vLLM servers left running after the job: {left}")
    return figures, problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument(
        "--no-layouts",
        dest="layouts",
        action="store_false",
        help="skip the runs in vLLM's own process layout (with and without a reserved core)",
    )
    parser.add_argument("--train", action="store_true", help="only the training job on configs/local-real.yaml")
    args = parser.parse_args()

    def log(message: str) -> None:
        print(message, file=sys.stderr if args.json else sys.stdout, flush=True)

    if args.train:
        figures, problems = train_run(log)
        report({**machine(), **figures, "ok": not problems}, args.json, log)
        for problem in problems:
            log(f"FAILED: {problem}")
        return 1 if problems else 0

    batch = requests(args.prompts, args.tokens)
    figures: dict[str, Any] = {**machine(), "prompts": args.prompts, "max_tokens": args.tokens}

    # Baseline: the local provider (transformers) in this process, before Ray takes the cores.
    loaded = time.perf_counter()
    local = build_provider(
        WorkerConfig(
            name="bench-local", provider="local", model="smollm2-135m", temperature=0.0, max_tokens=args.tokens
        )
    )
    figures["local_load_s"] = round(time.perf_counter() - loaded, 1)
    asyncio.run(run(local, batch[:1], False))
    tokens, seconds = asyncio.run(run(local, batch, False))
    figures["local_tokens_per_s"] = round(tokens / seconds, 1)
    figures["local_tokens"] = tokens
    log(
        f"local provider: loaded in {figures['local_load_s']} s; {figures['local_tokens_per_s']} tokens/s "
        f"({tokens} tokens, one request at a time)"
    )
    del local

    import ray

    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    try:
        runs: dict[str, dict[str, str]] = {"default": {}}
        if args.layouts:
            runs["three_processes"] = {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
            runs["three_processes_all_cores"] = {
                "VLLM_ENABLE_V1_MULTIPROCESSING": "1",
                "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
            }
        for label, env in runs.items():
            served = served_figures(label, env, batch, log)
            prefix = "served" if label == "default" else f"served_{label}"
            figures.update({f"{prefix}_{k}": v for k, v in served.items()})
            for mode in ("sequential", "concurrent"):
                figures[f"{prefix}_{mode}_vs_local"] = round(
                    served[f"{mode}_tokens_per_s"] / figures["local_tokens_per_s"], 2
                )
    finally:
        ray.shutdown()
    report(figures, args.json, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
