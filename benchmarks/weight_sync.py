"""Weight sync, learner -> vLLM engine: seconds per sync by each transport
against the floor of a plain in-memory copy of the same tensors (goal: the
transport `auto` picks within 2x the floor), and where the time of the
shared-memory sync goes (the hand-over into shared memory, vLLM's loaders,
the re-pack the CPU backend needs, the prefix-cache reset, the actor hop;
vLLM's own `reload_weights` beside it). benchmarks/policy.py runs the same
measurement after its generation and learner figures; this script runs only
it, and is the GPU check:

    python benchmarks/weight_sync.py [--json] [--transports auto] [--syncs 3] [--dry-run]

On a machine with CUDA GPUs (official vllm) `auto` measures vLLM's
weight-transfer API and the object store: with one GPU the learner and the
engine share it and sync by CUDA IPC (vLLM's "ipc" engine); with two or more,
by NCCL (vLLM's "nccl" engine; NCCL refuses two ranks on one device, so
`--transports nccl` on one GPU records its error). Each collective gets its
own learner and engine. Expected 2-4 minutes (each round starts an engine and
a learner on SmolLM2-135M, the embedded model: no network). `--dry-run`
checks the arguments and prints the JSON's shape (every figure null) without
Ray, vLLM or a model.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

GOAL = 2.0  # the bound: a sync within 2x the in-memory copy floor
TRANSPORT_KEYS = ("setup_s", "seconds", "gb_per_s", "ratio_over_floor")
COLLECTIVES = ("gloo", "nccl", "ipc")  # vLLM weight-transfer backends: one per engine
ENGINE_PARTS = ("map_s", "load_s", "verify_s", "repack_s", "total_s")


def timed(fn: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - started


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def figures_shape(transports: list[str], auto: str) -> dict[str, Any]:
    """The JSON a run fills in (every figure None): the dry run prints it, tests check it."""
    return {
        "gb": None,
        "copy_floor_s": None,
        "copy_floor_gb_per_s": None,
        "transports": {t: dict.fromkeys(TRANSPORT_KEYS) for t in transports},
        "breakdown": {
            "handover_s": None,  # learner rank 0 copies into the shared memory
            "engine_load_s": None,  # the engine's whole load, as the learner's driver waits for it
            "engine": dict.fromkeys((*ENGINE_PARTS, "views", "packed")),  # inside the engine (vllm_load.py)
            "cache_reset_s": None,
            "actor_hop_s": None,  # engine_load_s less what ran inside the engine
            "reload_weights_s": None,  # vLLM's reload_weights on the same memory, for comparison
            "over_floor": {},
        },
        "auto": auto,
        "sync_over_copy_floor": None,
        "goal_sync_over_copy_floor": GOAL,
    }


def _inside_engine(self: Any) -> dict[str, float]:  # run in a GeneratorActor by __ray_call__
    return dict(getattr(self.sampler, "last_load", None) or {})


def _cache_reset(self: Any) -> float:
    return timed(self.sampler.llm.reset_prefix_cache)[1]


def _reload_weights(self: Any) -> float:
    tensors = list(self.shared.tensors())
    return timed(lambda: self.sampler.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(tensors)}))[
        1
    ]


def measure(learner: Any, pool: Any, transports: list[str], syncs: int, auto: str) -> dict[str, Any]:
    """Time `syncs` syncs (after a warm-up) of `learner`'s weights into `pool` by each transport."""
    import ray
    import torch

    from actors.weight_sync import WeightSync

    gpus = torch.cuda.device_count()
    figures = figures_shape(transports, auto)
    weights = ray.get(learner.named_weights())
    sources = [t.to("cuda" if gpus else "cpu") for _, t in weights]
    buffers = [torch.empty_like(t) for t in sources]
    size_gb = sum(t.numel() * t.element_size() for t in sources) / 1e9

    def copy() -> None:
        for b, t in zip(buffers, sources):
            b.copy_(t)
        if gpus:
            torch.cuda.synchronize()

    copy()
    floor = median([timed(copy)[1] for _ in range(5)])
    figures.update(gb=round(size_gb, 3), copy_floor_s=round(floor, 4), copy_floor_gb_per_s=round(size_gb / floor, 2))
    print(f"weight sync: {size_gb:.2f} GB; in-memory copy floor {floor:.3f}s ({size_gb / floor:.2f} GB/s)", flush=True)
    version = 1000
    for transport in transports:
        try:
            sync, setup_s = timed(lambda transport=transport: WeightSync(learner, pool, transport))
            version += 1
            sync.push(version)  # warm-up: the first round allocates (and, in shared memory, checks views)
            seconds = []
            for _ in range(syncs):
                version += 1
                seconds.append(timed(lambda sync=sync, version=version: sync.push(version))[1])
        except Exception as err:  # one GPU cannot host NCCL's two ranks: say so, measure the rest
            figures["transports"][transport] = {"error": f"{type(err).__name__}: {err}"[:500]}
            print(f"  {transport}: failed: {err}", flush=True)
            continue
        m = median(seconds)
        figures["transports"][transport] = {
            "setup_s": round(setup_s, 3),
            "seconds": round(m, 4),
            "gb_per_s": round(size_gb / m, 2),
            "ratio_over_floor": round(m / floor, 2),
        }
        print(f"  {transport}: {m:.3f}s per sync ({m / floor:.1f}x the floor; set-up {setup_s:.2f}s)", flush=True)
    if "shared_memory" in transports and "error" not in figures["transports"]["shared_memory"]:
        figures["breakdown"] = breakdown(learner, pool, syncs, floor, version)
    chosen = figures["transports"].get(auto, {}).get("seconds")
    figures["sync_over_copy_floor"] = None if chosen is None else round(chosen / floor, 2)
    return figures


def breakdown(learner: Any, pool: Any, syncs: int, floor: float, version: int) -> dict[str, Any]:
    """Where a shared-memory sync's time goes, each part's median over `syncs` rounds."""
    import ray

    from actors.weight_sync import WeightSync

    WeightSync(learner, pool, "shared_memory")
    engine = pool.actors[0]
    parts: dict[str, list[float]] = {}
    inside: list[dict[str, float]] = []
    for _ in range(syncs + 1):  # the first round (own memory, checking the views) is not counted
        version += 1
        _, handover = timed(lambda: ray.get([a.write_shared_weights.remote() for a in learner.actors]))
        _, load = timed(lambda version=version: pool.load_shared_weights(version))
        inside.append(ray.get(engine.__ray_call__.remote(_inside_engine)))
        reset = ray.get(engine.__ray_call__.remote(_cache_reset))
        parts.setdefault("handover_s", []).append(handover)
        parts.setdefault("engine_load_s", []).append(load)
        parts.setdefault("cache_reset_s", []).append(reset)
        parts.setdefault("actor_hop_s", []).append(load - inside[-1].get("total_s", 0.0) - reset)
    parts["reload_weights_s"] = [ray.get(engine.__ray_call__.remote(_reload_weights)) for _ in range(syncs)]
    result: dict[str, Any] = {k: round(median(v[1:] if k != "reload_weights_s" else v), 4) for k, v in parts.items()}
    counted = inside[1:]
    result["engine"] = {
        k: round(median([d[k] for d in counted]), 4) if all(k in d for d in counted) else None
        for k in (*ENGINE_PARTS, "views", "packed")
    }
    over = {k: v / floor for k, v in result.items() if isinstance(v, float)}
    over.update({f"engine.{k}": v / floor for k, v in result["engine"].items() if k.endswith("_s") and v is not None})
    result["over_floor"] = {k: round(v, 2) for k, v in over.items()}
    print("  shared_memory parts (x the floor): " + ", ".join(f"{k} {v}" for k, v in result["over_floor"].items()))
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="auto", help="the engine's (generator.dtype); the learner's is float32")
    parser.add_argument("--transports", default="auto", help="comma-separated, or auto: every one this machine has")
    parser.add_argument("--syncs", type=int, default=3, help="timed syncs per transport (median reported)")
    parser.add_argument("--dry-run", action="store_true", help="print the JSON's shape; start nothing")
    args = parser.parse_args()
    if args.syncs < 1:
        parser.error("--syncs must be at least 1")

    import torch

    gpus = torch.cuda.device_count()
    collective = "gloo" if not gpus else ("nccl" if gpus >= 2 else "ipc")
    # NCCL refuses two ranks on one device, so on one GPU it is left out unless named.
    every = ["object_store", "shared_memory", collective] if not gpus else [collective, "object_store"]
    transports = every if args.transports == "auto" else args.transports.split(",")
    auto = "nccl" if gpus >= 2 else ("ipc" if gpus else "shared_memory")
    result: dict[str, Any] = {"benchmark": "weight_sync", "model": args.model, "dtype": args.dtype}
    if args.dry_run:
        result.update(dry_run=True, weight_sync=figures_shape(transports, auto))
    else:
        result.update(run(args, transports, auto, gpus))
        from benchmarks.measure import keep_result

        keep_result(result)
    if args.json:
        print(json.dumps(result))
    return 0


def run(args: argparse.Namespace, transports: list[str], auto: str, gpus: int) -> dict[str, Any]:
    """One learner and one engine per collective transport (an engine takes one weight-transfer
    backend); the object store and shared memory ride along with the first."""
    import ray
    import torch

    from actors.generator import GeneratorPool
    from actors.learner import LearnerGroup
    from conductor_rl.config import GeneratorConfig, LearnerConfig

    # One GPU: the learner and the engine share it (CUDA IPC); two: each its own.
    engine = {"num_gpus": 0.5 if gpus == 1 else 1} if gpus else {"num_cpus": 1}
    rank = {"GPU": 0.5 if gpus == 1 else 1, "CPU": 1} if gpus else {"CPU": 1}
    collectives = [t for t in transports if t in COLLECTIVES]
    others = [t for t in transports if t not in COLLECTIVES]
    rounds = [(c, [c, *(others if i == 0 else [])]) for i, c in enumerate(collectives)] or [(None, others)]
    merged: dict[str, Any] | None = None
    ray.init(include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    try:
        for weight_transfer, these in rounds:
            started: list[Any] = []
            try:
                pool = GeneratorPool(
                    args.model,
                    GeneratorConfig(max_model_len=1024, dtype=args.dtype),
                    resources=engine,
                    weight_transfer=weight_transfer,
                )
                started.append(pool)
                learner = LearnerGroup(
                    args.model, LearnerConfig(precision="float32"), total_steps=1, resources_per_rank=rank
                )
                started.append(learner)
                figures = measure(learner, pool, these, args.syncs, auto)
            except Exception as err:  # an engine that cannot take this backend here
                figures = figures_shape(these, auto)
                figures["transports"] = {t: {"error": f"{type(err).__name__}: {err}"[:500]} for t in these}
            finally:
                for part in reversed(started):
                    part.shutdown()
            if merged is None:
                merged = figures
            else:
                merged["transports"].update(figures["transports"])
    finally:
        ray.shutdown()
    assert merged is not None
    chosen = merged["transports"].get(auto, {}).get("seconds")
    floor = merged["copy_floor_s"]
    merged["sync_over_copy_floor"] = None if chosen is None or not floor else round(chosen / floor, 2)
    device = torch.cuda.get_device_name(0) if gpus else f"cpu x{os.cpu_count()}"
    return {"device": device, "weight_sync": merged}


if __name__ == "__main__":
    sys.exit(main())
