"""Step 0 of a new training run (`train.warm_start`): supervised learner steps on demonstration
plans (conductor_rl/plan/demonstrations.py, conductor_rl/policy/warm_start.py), then the new
weights to the generators, before jobs/iteration.py's first iteration."""

from __future__ import annotations

import time

from conductor_rl.policy.warm_start import warm_start_for
from jobs.common import log
from jobs.iteration import TrainingRun


def warm_start(run: TrainingRun) -> dict:
    """Step 0 of a new run (train.warm_start): learner steps on demonstration plans, then the new
    weights to the generators. Returns what it did, for the run's summary."""
    c, started = run.config.train, time.perf_counter()
    w = c.warm_start
    fits = []
    batches = warm_start_for(run.config, run.system.prompts, run.stream.questions)
    for k, batch in enumerate(batches):
        run.stop.check()
        fits.append(run.actors.learners.train_step(batch).logprob_mean)
        log(f"warm start: step {k + 1}/{w.steps}, demonstrations' log-prob per token {fits[-1]:.3f} before it")
    run.state.version += 1
    run.actors.weight_sync.push(run.state.version)
    return {
        "steps": len(fits),
        "logprob_first": fits[0],
        "logprob_last": fits[-1],
        "seconds": time.perf_counter() - started,
    }
