"""What each baseline sends to the workers for a batch of questions: its plans,
one per (question, repeat), built from what the evaluation knows so far.

The Conductor's samples come from its generator (jobs/evaluate.py); the rest
are built here from `baselines`: `single` and `reflect` from the method alone,
`moa` from the configured layers, `random` from the lengths of the Conductor's
plans, `oracle` from the single-worker verdicts on the same questions, and
`router` from a router trained on a pilot pass over training questions.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from conductor_rl.config import Price
from conductor_rl.data import Question
from conductor_rl.grading.verdict import SCORED_VERDICTS

from .baselines import moa_plan, oracle_worker, random_plan, reflection_plan, single_plan
from .methods import Method
from .router import Router
from .runner import Sample


class MissingEvidenceError(RuntimeError):
    """A baseline needs results the evaluation does not have (the oracle without single-worker runs)."""


@dataclass
class BaselineContext:
    """What the baselines need beyond the question: the pool and what earlier cells found."""

    worker_names: Sequence[str]
    prices: Sequence[Price]
    max_steps: int
    moa_layers: int = 3
    moa_proposers: Sequence[int] | None = None
    moa_aggregator: int = 0
    seed: int = 0
    # The Conductor's plan lengths seen so far (for `random`); empty: uniform lengths.
    conductor_lengths: list[int] = field(default_factory=list)
    # verdicts[benchmark][question id][worker name] = share of repeats correct (for `oracle`).
    single_verdicts: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    router: Router | None = None


def _rng(seed: int, method: str, question_id: str, repeat: int) -> random.Random:
    digest = hashlib.sha256(f"{seed}/{method}/{question_id}/{repeat}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def baseline_samples(
    method: Method, benchmark: str, questions: Sequence[Question], repeats: int, ctx: BaselineContext
) -> list[list[Sample]]:
    """`repeats` samples for each question (the same plan each time, except for `random`)."""
    n = len(ctx.worker_names)
    if method.kind == "single":
        worker = method.worker
        assert worker is not None, "a single-worker method names its worker"
        plans = [single_plan(q.question, worker, q.answer_kind) for q in questions]
    elif method.kind == "reflect":
        worker, rounds = method.worker, method.rounds
        assert worker is not None and rounds is not None, "a reflection method names its worker and rounds"
        plans = [reflection_plan(q.question, worker, rounds, q.answer_kind) for q in questions]
    elif method.kind == "moa":
        proposers = list(ctx.moa_proposers) if ctx.moa_proposers is not None else list(range(n))
        plans = [moa_plan(q.question, proposers, ctx.moa_aggregator, ctx.moa_layers, q.answer_kind) for q in questions]
    elif method.kind == "router":
        if ctx.router is None:
            raise MissingEvidenceError("the router baseline needs a trained router (a pilot pass): none was given")
        picks = ctx.router.route([q.question for q in questions])
        plans = [single_plan(q.question, w, q.answer_kind) for q, w in zip(questions, picks)]
    elif method.kind == "oracle":
        verdicts = ctx.single_verdicts.get(benchmark, {})
        plans = []
        for q in questions:
            by_worker = verdicts.get(q.id)
            if not by_worker or len(by_worker) < n:
                raise MissingEvidenceError(
                    f"oracle: question {q.id} of {benchmark} lacks single-worker results for every worker "
                    f"(have {sorted(by_worker or {})}); the oracle picks from single:<worker> runs"
                )
            best = oracle_worker([by_worker[name] for name in ctx.worker_names], ctx.prices)
            plans.append(single_plan(q.question, 0 if best is None else best, q.answer_kind))
    elif method.kind == "random":
        return [
            [
                Sample.of_plan(
                    random_plan(
                        q.question,
                        n,
                        ctx.conductor_lengths,
                        _rng(ctx.seed, method.name, q.id, r),
                        ctx.max_steps,
                        q.answer_kind,
                    )
                )
                for r in range(repeats)
            ]
            for q in questions
        ]
    else:
        raise ValueError(f"{method.name}: not a baseline (the Conductor's plans come from its generator)")
    return [[Sample.of_plan(plan)] * repeats for plan in plans]


def single_verdicts_of(records: Sequence, worker_names: Sequence[str]) -> dict[str, dict[str, dict[str, float]]]:
    """Per benchmark and question, each worker's share of correct repeats in the `single:<worker>` records."""
    tally: dict[str, dict[str, dict[str, list[int]]]] = {}
    for r in records:
        if not r.method.startswith("single:") or r.verdict not in SCORED_VERDICTS:
            continue
        worker = r.method.split(":", 1)[1]
        if worker not in worker_names:
            continue
        counts = tally.setdefault(r.benchmark, {}).setdefault(r.question_id, {}).setdefault(worker, [0, 0])
        counts[0] += r.verdict == "correct"
        counts[1] += 1
    return {b: {q: {w: c / t for w, (c, t) in ws.items()} for q, ws in qs.items()} for b, qs in tally.items()}


def conductor_lengths_of(records: Sequence) -> list[int]:
    """The step counts of the Conductor's parsed plans (for `random`)."""
    return [r.steps for r in records if r.method.startswith("conductor:") and r.verdict != "plan_error" and r.steps]
