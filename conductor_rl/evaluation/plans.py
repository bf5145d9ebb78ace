"""What each baseline sends to the workers for a batch of questions: its plans,
one per (question, repeat), built from what the evaluation knows so far.

The Conductor's samples come from its generator (jobs/evaluate.py); the rest
are built here from `baselines`: `single` and `reflect` from the method alone,
`moa` from the configured layers, `random` from the lengths of the Conductor's
plans, `oracle` from the single-worker verdicts on the same questions, `router`
from a router trained on a pilot pass over training questions, and, in a pool of
simulated workers, `oracle-single` and `optimal` from the exact optimum
(conductor_rl/evaluation/optimal.py); with a real worker in the pool,
`oracle-single` picks as `oracle` does.

No baseline calls the Conductor's own seat (`provider: conductor`): it is not a worker that
answers, so every worker a baseline may choose is one of `BaselineContext.places`.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from conductor_rl.config import Config, Price, answering_workers
from conductor_rl.data import Question
from conductor_rl.data.difficulty import difficulty_of
from conductor_rl.grading.verdict import SCORED_VERDICTS
from conductor_rl.plan import Plan
from conductor_rl.plan.roster import Roster

from .baselines import moa_plan, optimal_plan, oracle_worker, random_plan, reflection_plan, single_plan, wording
from .methods import Method
from .optimal import OptimalPlan, PoolOptimum, simulated_pool
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
    moa_layers: int = 2
    moa_proposers: Sequence[int] | None = None
    moa_aggregator: int = 0
    seed: int = 0
    # The Conductor's plan lengths seen so far (for `random`); empty: uniform lengths.
    conductor_lengths: list[int] = field(default_factory=list)
    # verdicts[benchmark][question id][worker name] = share of repeats correct (for `oracle`).
    single_verdicts: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    router: Router | None = None
    # The exact optimum of a pool of simulated workers (for `oracle-single`, `optimal`); None: a real worker.
    optimum: PoolOptimum | None = None
    # The pool places of `worker_names` (the pool less the Conductor's seat); None: the pool, in order.
    places: Sequence[int] | None = None

    def on_pool(self, plan: Plan) -> Plan:
        """`plan`, whose steps name workers by their index in `worker_names`, with pool places."""
        return plan if self.places is None else Roster(tuple(self.places)).pool_plan(plan)

    def place(self, index: int) -> int:
        """The pool place of `worker_names[index]`."""
        return index if self.places is None else self.places[index]


def baseline_context(config: Config) -> BaselineContext:
    """The context of an evaluation's baselines, before any cell has run."""
    pool = [w.name for w in config.workers]
    places = answering_workers(config.workers)  # the Conductor's seat answers nothing: no baseline calls it
    workers = [config.workers[i] for i in places]
    e = config.evaluate
    optimum = None
    if simulated_pool(workers):
        optimum = PoolOptimum(workers, 0, config.conductor.max_steps, e.cost_weight)
    return BaselineContext(
        [w.name for w in workers],
        [w.price for w in workers],
        config.conductor.max_steps,
        e.moa_layers,
        None if e.moa_proposers is None else [pool.index(n) for n in e.moa_proposers],
        pool.index(moa_aggregator_of(config)),
        config.conductor.seed,
        optimum=optimum,
        places=places,
    )


def moa_aggregator_of(config: Config) -> str:
    """The MoA aggregator: `evaluate.moa_aggregator`, else the answering worker with the highest output
    price (the paper names none; the priciest is taken as the strongest), ties to the first."""
    if config.evaluate.moa_aggregator:
        return config.evaluate.moa_aggregator
    answering = [config.workers[i] for i in answering_workers(config.workers)]
    return max(answering, key=lambda w: w.price.output).name  # max keeps the first of equals


def oracle_single_label(config: Config) -> str:
    """How `oracle-single` picks in this pool, for the report."""
    if simulated_pool([config.workers[i] for i in answering_workers(config.workers)]):
        return "exact: the highest expected success (less cost) by the simulator's rules"
    return "estimated: the share of correct single:<worker> repeats, as oracle"


def exact_optimum(question: Question, optimum: PoolOptimum, single: bool) -> OptimalPlan:
    """The best one-step plan (`single`) or the best plan of the family for `question`."""
    topical, solve_reads = wording(question.question)
    difficulty, chars = difficulty_of(question.source, question.meta), len(question.question)
    if single:
        return optimum.single(question.domain, difficulty, chars, on_task=topical)
    return optimum.best(question.domain, difficulty, chars, on_task=topical, solve_reads=solve_reads)


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
        plans = [single_plan(q.question, worker) for q in questions]
    elif method.kind == "reflect":
        worker, rounds = method.worker, method.rounds
        assert worker is not None and rounds is not None, "a reflection method names its worker and rounds"
        plans = [reflection_plan(q.question, worker, rounds) for q in questions]
    elif method.kind == "moa":
        proposers = list(ctx.moa_proposers) if ctx.moa_proposers is not None else [ctx.place(i) for i in range(n)]
        plans = [moa_plan(q.question, proposers, ctx.moa_aggregator, ctx.moa_layers) for q in questions]
    elif method.kind == "router":
        if ctx.router is None:
            raise MissingEvidenceError("the router baseline needs a trained router (a pilot pass): none was given")
        picks = ctx.router.route([q.question for q in questions])
        plans = [single_plan(q.question, ctx.place(w)) for q, w in zip(questions, picks)]
    elif method.kind == "optimal":
        if ctx.optimum is None:
            raise MissingEvidenceError("optimal: the best plan is computable only for a pool of simulated workers")
        best = [exact_optimum(q, ctx.optimum, False).steps for q in questions]
        plans = [ctx.on_pool(optimal_plan(steps, q.question)) for q, steps in zip(questions, best)]
    elif method.kind == "oracle-single" and ctx.optimum is not None:
        picks = [ctx.place(exact_optimum(q, ctx.optimum, True).steps[0].worker) for q in questions]
        plans = [single_plan(q.question, w) for q, w in zip(questions, picks)]
    elif method.kind in ("oracle", "oracle-single"):
        plans = [single_plan(q.question, _oracle_pick(method, benchmark, q, ctx)) for q in questions]
    elif method.kind == "random":
        return [
            [
                Sample.of_plan(
                    ctx.on_pool(
                        random_plan(
                            q.question,
                            n,
                            ctx.conductor_lengths,
                            _rng(ctx.seed, method.name, q.id, r),
                            ctx.max_steps,
                        )
                    )
                )
                for r in range(repeats)
            ]
            for q in questions
        ]
    else:
        raise ValueError(f"{method.name}: not a baseline (the Conductor's plans come from its generator)")
    return [[Sample.of_plan(plan)] * repeats for plan in plans]


def _oracle_pick(method: Method, benchmark: str, q: Question, ctx: BaselineContext) -> int:
    by_worker = ctx.single_verdicts.get(benchmark, {}).get(q.id)
    if not by_worker or len(by_worker) < len(ctx.worker_names):
        raise MissingEvidenceError(
            f"{method.name}: question {q.id} of {benchmark} lacks single-worker results for every worker "
            f"(have {sorted(by_worker or {})}); the oracle picks from single:<worker> runs"
        )
    best = oracle_worker([by_worker[name] for name in ctx.worker_names], ctx.prices)
    return ctx.place(0 if best is None else best)


def _single_records(records: Sequence, worker_names: Sequence[str], repeats: int | None = None) -> Iterator:
    """(worker, record) of the `single:<worker>` records of the pool's workers (repeats below `repeats`)."""
    for r in records:
        worker = r.method.split(":", 1)[1] if r.method.startswith("single:") else None
        if worker in worker_names and (repeats is None or r.repeat < repeats):
            yield worker, r


def single_verdict_lists(
    records: Sequence, worker_names: Sequence[str], repeats: int | None = None
) -> dict[str, dict[str, dict[str, list[str]]]]:
    """Per benchmark and question, each worker's scored verdicts in the `single:<worker>` records
    (repeats below `repeats`, when given)."""
    lists: dict[str, dict[str, dict[str, list[str]]]] = {}
    for worker, r in _single_records(records, worker_names, repeats):
        if r.verdict in SCORED_VERDICTS:
            lists.setdefault(r.benchmark, {}).setdefault(r.question_id, {}).setdefault(worker, []).append(r.verdict)
    return lists


def single_verdicts_of(records: Sequence, worker_names: Sequence[str]) -> dict[str, dict[str, dict[str, float]]]:
    """Per benchmark and question, each worker's share of correct repeats in the `single:<worker>` records."""
    lists = single_verdict_lists(records, worker_names)
    return {
        b: {q: {w: v.count("correct") / len(v) for w, v in ws.items()} for q, ws in qs.items()}
        for b, qs in lists.items()
    }


def call_costs_of(
    records: Sequence, worker_names: Sequence[str], benchmark: str, repeats: int | None = None
) -> list[float | None]:
    """Each worker's mean USD per call in its `single:<worker>` records of `benchmark` (repeats below
    `repeats`, when given); None: it made no call there."""
    spent = {w: [0.0, 0] for w in worker_names}
    for worker, r in _single_records(records, worker_names, repeats):
        if r.benchmark == benchmark:
            spent[worker][0] += r.cost_usd
            spent[worker][1] += r.calls
    return [usd / calls if calls else None for usd, calls in spent.values()]


def conductor_lengths_of(records: Sequence) -> list[int]:
    """The step counts of the Conductor's parsed plans (for `random`)."""
    return [r.steps for r in records if r.method.startswith("conductor:") and r.verdict != "plan_error" and r.steps]
