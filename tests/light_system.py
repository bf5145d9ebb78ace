"""A training system whose generator and learner are stand-ins (their start is most of a minute), with the
real worker pools, cost ledger, spend journal and grader pool: for what `train` does around them.

    python -m tests.light_system [train arguments ...]    # `conductor-rl train` on it, in a process of its own
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path


class FakeGenerators:
    """Stands in for the vLLM engines: sample i of every question is the one-step plan for
    worker `i % spread` (spread=1: every plan asks worker 0)."""

    def __init__(self, spread: int) -> None:
        self.spread = spread
        self.version = 0  # stamped on each sample, as a GeneratorActor does

    def sample(self, prompts, n, *_args, seed=None, shape=None, **_kwargs):
        from conductor_rl.plan.shape import shape_per_prompt
        from conductor_rl.policy.sampling import Sample

        def plan(worker: int) -> str:  # what follows the response prefix "model_id = ["
            return f'{worker}]\nsubtasks = ["Answer the question."]\naccess_list = [[]]'

        def recursive(call_seed: int) -> Sample:  # a recursive call: keep the answer on an even seed
            text = "]\nsubtasks = []\naccess_list = []\n" if call_seed % 2 == 0 else plan(0)
            return Sample(text, (21, 22), (-2.0, -2.0), "stop", self.version)

        shapes = shape_per_prompt(shape, len(prompts))
        return [
            [recursive(seed[j])]
            if shapes[j] is not None and shapes[j].allow_empty
            else [
                Sample(plan(i % self.spread), (11, 12, 13), (-1.0, -1.0, -1.0), "stop", self.version) for i in range(n)
            ]
            for j in range(len(prompts))
        ]

    def load_weights(self, _weights, version) -> None:
        self.version = version

    def paused(self):
        return contextlib.nullcontext()

    def shutdown(self) -> None:
        pass


class FakeLearners:
    """Stands in for the DeepSpeed learner group: no step, a one-file checkpoint; keeps the batches."""

    def __init__(self) -> None:
        self.batches = []
        self.seconds = 0.0  # how long a step takes (asynchronous runs overlap it with collection)
        self.epochs = 0  # the last step's learner.epochs

    def train_step(self, batch, epochs: int = 1):
        from conductor_rl.policy.learner import StepStats

        time.sleep(self.seconds)
        self.batches.append(batch)
        self.epochs = epochs

        return StepStats(0.0, 0.0, 0.0, 1.0, 0.0, 0.0, sum(map(len, batch.completion_ids)), 0.0)

    def named_weights(self):
        return None

    def save(self, folder: str) -> str:
        (Path(folder) / "model").mkdir(parents=True, exist_ok=True)
        (Path(folder) / "model" / "weights.bin").write_bytes(b"w")
        return folder

    def load(self, folder: str) -> None:
        assert (Path(folder) / "model" / "weights.bin").exists(), f"not a checkpoint of this learner: {folder}"

    def shutdown(self) -> None:
        pass


def light_build(spread: int = 1, learners_seconds: float = 0.0):
    """A `build_system` stand-in; `.spread`, `.learners_seconds` and (once built) `.learners` on it."""
    import jobs.training_system as ts
    from actors.grader import GraderPool
    from actors.weight_sync import WeightSync

    def build(config, model, weights_version, total_steps, journal=None):
        workers = ts.start_worker_pools(
            config, config.train.budget_usd, config.train.worker_replicas, journal=journal, job="train"
        )
        graders = GraderPool(config.grader, num_cpus=0.5)
        graders.wait_ready()
        generators, learners = FakeGenerators(build.spread), FakeLearners()
        learners.seconds = build.learners_seconds
        build.learners = learners
        return ts.TrainingSystem(
            generators,
            learners,
            WeightSync(learners, generators, "object_store"),
            workers.pools,
            graders,
            workers.ledger,
        )

    build.spread = spread
    build.learners_seconds = learners_seconds
    return build


if __name__ == "__main__":
    import jobs.training_system as ts
    from jobs.train import main

    ts.build_system = light_build()
    sys.exit(main(sys.argv[1:]))
