"""What an evaluation's worker calls will cost before it starts: one forecast per method
(conductor_rl/workers/forecast.py), summed over its samples still to run.

Calls per sample, by method (conductor_rl/evaluation/baselines.py for the plans' shapes):

    conductor   1 to max_steps at each recursion level (the method's @depth, else conductor.max_depth)
    single      1, on its worker           reflect   its rounds + 1, on its worker
    moa         proposers x (layers - 1) + 1 (8 on the paper's 7 workers)
    random, optimal   1 to max_steps
    router, oracle, oracle-single   1

The router's own pilot pass (when `evaluate.router_pilot` is unset) adds one call per worker,
pilot question and pilot repeat.
"""

from __future__ import annotations

from collections.abc import Collection

from conductor_rl.config import Config, answering_workers
from conductor_rl.evaluation.methods import Method
from conductor_rl.evaluation.prepare import Evaluation
from conductor_rl.workers.forecast import Forecast, Range, forecast, summed
from conductor_rl.workers.limits import CHARS_PER_TOKEN

#: (method, benchmark, question id, repeat): a sample the records already hold.
Done = Collection[tuple[str, str, str, int]]


def calls_per_sample(method: Method, config: Config) -> Range:
    """How many worker calls one sample of `method` makes (the module's table)."""
    c, e = config.conductor, config.evaluate
    if method.kind == "conductor":
        depth = c.max_depth if method.depth is None else method.depth
        return Range(1, c.max_steps * (depth + 1))
    if method.kind == "reflect":
        calls = (method.rounds or 0) + 1
        return Range(calls, calls)
    if method.kind == "moa":
        proposers = len(e.moa_proposers) if e.moa_proposers else len(answering_workers(config.workers))
        calls = proposers * (e.moa_layers - 1) + 1
        return Range(calls, calls)
    if method.kind in ("random", "optimal"):
        return Range(1, c.max_steps)
    return Range(1, 1)  # single, router, oracle, oracle-single


def evaluation_forecast(ev: Evaluation, done: Done = ()) -> Forecast:
    """The forecast of every sample of `ev` not in `done`."""
    config, repeats = ev.config, ev.config.evaluate.repeats
    questions = [q for qs in ev.benchmarks.values() for q in qs]
    chars = sum(len(q.question) for q in questions) / max(len(questions), 1)
    tokens = int(chars / CHARS_PER_TOKEN)
    parts = []
    for method in ev.methods:
        samples = sum(
            (method.name, benchmark, q.id, r) not in done
            for benchmark, qs in ev.benchmarks.items()
            for q in qs
            for r in range(repeats)
        )
        workers = config.workers if method.worker is None else [config.workers[method.worker]]
        parts.append(forecast(workers, samples, calls_per_sample(method, config), tokens))
    e = config.evaluate
    if any(m.kind == "router" for m in ev.methods) and not e.router_pilot and ev.pilot:
        pilot = len(ev.pilot) * e.router_pilot_repeats
        parts += [forecast([w], pilot, Range(1, 1), tokens) for w in config.workers]
    return summed(parts, "the methods' plan shapes, the workers' prices and output tokens")
