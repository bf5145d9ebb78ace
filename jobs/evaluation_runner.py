"""The actors of an evaluation and its loop over methods, benchmarks and batches: the
worker pools and the grader pool (jobs/training_system.py), a Conductor method's
generator engines while its cells run, and each batch's samples run, graded and
appended to the record store."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from conductor_rl.data import Question
from conductor_rl.evaluation import (
    EvalRecord,
    Pool,
    RecordStore,
    Router,
    baseline_samples,
    conductor_lengths_of,
    parse_method,
    record_of,
    run_batch,
    single_verdicts_of,
    stopped_by_budget,
)
from conductor_rl.evaluation.methods import Method
from conductor_rl.evaluation.plans import baseline_context, call_costs_of, single_verdict_lists
from conductor_rl.evaluation.prepare import Evaluation
from conductor_rl.evaluation.runner import Sample
from conductor_rl.grading.verdict import SCORED_VERDICTS
from conductor_rl.rollout.recursion import Recursion
from conductor_rl.system import System
from conductor_rl.workers.providers import cached
from conductor_rl.workers.spend_journal import JOURNAL_FILE
from jobs.common import log
from jobs.run_control import StopSignal, check_budget

if TYPE_CHECKING:
    from actors.generator import GeneratorPool

PILOT = "pilot"  # the benchmark name of the router's pilot records (left out of the table)


class Progress:
    """A tqdm bar over samples, with the accuracy so far and the money spent."""

    def __init__(self, total: int, enabled: bool) -> None:
        from tqdm import tqdm

        self.bar = tqdm(
            total=total, desc="evaluate", unit="sample", file=sys.stderr, disable=not enabled, dynamic_ncols=True
        )
        self.correct = self.graded = 0

    def update(self, records: Sequence[EvalRecord], where: str, spent_usd: float) -> None:
        self.correct += sum(r.verdict == "correct" for r in records)
        self.graded += sum(r.verdict in (*SCORED_VERDICTS, "plan_error") for r in records)
        accuracy = self.correct / self.graded if self.graded else 0.0
        self.bar.set_postfix_str(f"{where} acc {accuracy:.3f} spent ${spent_usd:.4f}")
        self.bar.update(len(records))

    def close(self) -> None:
        self.bar.close()


@dataclass
class ConductorEngines:
    """A Conductor method's generator engines, the system its plans are sampled with (its checkpoint's
    settings) and how its plans call it again."""

    engines: GeneratorPool
    system: System
    recursion: Recursion | None


class Runner:
    """The actors of an evaluation and the loop over methods, benchmarks and batches. `conductors`:
    each Conductor method's system (jobs/evaluate.py `prepare` loaded their tokenizers)."""

    def __init__(self, ev: Evaluation, store: RecordStore, stop: StopSignal, conductors: dict[str, System]) -> None:
        from jobs.training_system import start_graders, start_worker_pools

        c = ev.config
        self.ev, self.store, self.stop, self.conductors = ev, store, stop, conductors
        budget = c.evaluate.budget_usd
        # The spend journal continues over every invocation on this folder: --budget-usd counts them all.
        journal = store.folder / JOURNAL_FILE
        self.workers = start_worker_pools(
            c, budget, c.train.worker_replicas, graders=True, journal=journal, job="evaluate"
        )
        self.spent_before = self.spent()  # by the invocations before this one
        self.graders = start_graders(c)
        per_repeat = []
        for r in range(max(c.evaluate.repeats, self.pilot_repeats())):
            if c.workflow.response_cache:  # each repeat its own namespace: a repeat is a fresh draw
                folder = str(Path(c.workflow.response_cache) / f"repeat-{r}")
                per_repeat.append([cached(p, w, folder) for p, w in zip(self.workers.pools, c.workers)])
            else:
                per_repeat.append(list(self.workers.pools))
        system = System(c)
        self.pool = Pool(
            per_repeat,
            system.step_limits,
            [w.price for w in c.workers],
            self.graders.grade_many,
            c.conductor.max_steps,
            c.evaluate.attempts,
            roster=system.pool_roster,
        )
        self.context = baseline_context(c)
        self.progress: Progress | None = None

    def pilot_repeats(self) -> int:
        """Repeats of the router's own pilot pass (0: none runs); each repeat its own draws."""
        e = self.ev.config.evaluate
        router = any(m.kind == "router" for m in self.ev.methods)
        return e.router_pilot_repeats if router and not e.router_pilot else 0

    def spent(self) -> float:
        """What the workers spent, every invocation on this folder counted (its spend journal)."""
        import ray

        return ray.get(self.workers.ledger.summary.remote())["total"]["cost_usd"]

    def check_budget(self) -> None:
        self.stop.check()
        check_budget(self.workers)

    def run(self) -> None:
        ev = self.ev
        todo = sum(self.remaining(m, b, qs) for m in ev.methods for b, qs in ev.benchmarks.items())
        self.progress = Progress(todo, ev.config.evaluate.progress)
        try:
            if any(m.kind == "router" for m in ev.methods):
                self.context.router = self.train_router()
            for method in ev.methods:
                self.run_method(method)
        finally:
            self.progress.close()

    def remaining(self, method: Method, benchmark: str, questions: Sequence[Question]) -> int:
        done = self.store.done()
        repeats = self.ev.config.evaluate.repeats
        return sum((method.name, benchmark, q.id, r) not in done for q in questions for r in range(repeats))

    def run_method(self, method: Method) -> None:
        conductor = None
        if method.kind == "conductor" and any(self.remaining(method, b, qs) for b, qs in self.ev.benchmarks.items()):
            conductor = self.start_conductor(method)
        # What the oracle and random plans take from the cells before them (methods run in that order).
        if method.kind in ("oracle", "oracle-single"):
            self.context.single_verdicts = single_verdicts_of(self.store.records(), self.context.worker_names)
        if method.kind == "random":
            self.context.conductor_lengths = conductor_lengths_of(self.store.records())
        try:
            for benchmark, questions in self.ev.benchmarks.items():
                self.run_cell(method, benchmark, questions, self.ev.config.evaluate.repeats, conductor)
        finally:
            if conductor is not None:
                conductor.engines.shutdown()

    def run_cell(
        self,
        method: Method,
        benchmark: str,
        questions: Sequence[Question],
        repeats: int,
        conductor: ConductorEngines | None = None,
    ) -> None:
        import ray

        ray.get(self.workers.ledger.start_cell.remote(f"{method.name}/{benchmark}"))  # where its calls are charged
        size = self.ev.config.evaluate.batch_questions
        for number, start in enumerate(range(0, len(questions), size)):
            batch = questions[start : start + size]  # fixed by position: a resumed batch samples what it did
            done = self.store.done()
            wanted = [[r for r in range(repeats) if (method.name, benchmark, q.id, r) not in done] for q in batch]
            if not any(wanted):
                continue
            self.check_budget()
            if conductor is not None:
                made = conductor_samples(conductor, method, benchmark, number, batch, repeats)
            else:
                made = baseline_samples(method, benchmark, batch, repeats, self.context)
            samples = [[made[i][r] for r in rs] for i, rs in enumerate(wanted)]
            recursion = None if conductor is None else conductor.recursion
            rollouts = asyncio.run(run_batch(batch, samples, wanted, self.pool, recursion))
            records = [
                record_of(method.name, benchmark, r, self.pool.prices) for r in rollouts if not stopped_by_budget(r)
            ]
            self.store.append(records)
            if benchmark in self.ev.benchmarks:
                assert self.progress is not None
                self.progress.update(records, f"{method.name} {benchmark}", self.spent())
            else:
                log(f"{benchmark}: {method.name} {start + len(batch)}/{len(questions)} questions")
        self.check_budget()

    # -- the Conductor's plans: sampled by the vLLM generator pool

    def start_conductor(self, method: Method) -> ConductorEngines:
        """The method's generator engines. Recursive calls sample from them too: a plan recurses by giving
        a step to the Conductor's seat, below the maximum depth (`@depth=N`, else the checkpoint's
        conductor.max_depth); nothing forces a call."""
        from jobs.training_system import start_generators

        system = self.conductors[method.name]
        c = system.config
        log(f"{method.name}: starting the generator ({c.generator.backend}, {c.conductor.model}) ...")
        engines = start_generators(c, c.conductor.model)
        seed = system.generation("evaluate").seed_for(method.name)
        return ConductorEngines(engines, system, system.engine_recursion(engines, "evaluate", seed))

    # -- the router: trained on every worker's verdicts over training questions, several repeats each

    def train_router(self) -> Router:
        ev, ctx, e = self.ev, self.context, self.ev.config.evaluate
        costs: list[float | None] | None = None
        verdicts: dict
        if e.router_pilot:
            from conductor_rl.data.mixture import load_pilot_verdicts

            verdicts = load_pilot_verdicts(e.router_pilot)
        else:
            repeats = self.pilot_repeats()
            log(
                f"router: pilot pass of every worker over {len(ev.pilot)} training questions "
                f"({ev.config.data.questions}), {repeats} times each ..."
            )
            pool = [w.name for w in ev.config.workers]  # a method names its worker by pool place
            for name in ctx.worker_names:
                self.run_cell(parse_method(f"single:{name}", pool), PILOT, ev.pilot, repeats)
            records = self.store.records()
            verdicts = single_verdict_lists(records, ctx.worker_names, repeats).get(PILOT, {})
            costs = call_costs_of(records, ctx.worker_names, PILOT, repeats)
        texts = {q.id: q.question for q in ev.pilot}
        ids = [q for q in verdicts if q in texts]
        return Router.fit(
            [texts[q] for q in ids], [verdicts[q] for q in ids], ctx.worker_names, ctx.prices, costs, e.cost_weight
        )


def conductor_samples(
    conductor: ConductorEngines, method: Method, benchmark: str, number: int, batch: Sequence[Question], repeats: int
) -> list[list[Sample]]:
    """`repeats` plans per question, sampled in one batch; a question whose prompt leaves no room
    for a plan gets a sample that says so (a plan error)."""
    c, prompts = conductor.system.config, conductor.system.prompts
    how = conductor.system.generation("evaluate")
    room = c.generator.max_model_len - how.max_new_tokens
    ids = [prompts.question_ids(q) for q in batch]
    fits = [i for i, x in enumerate(ids) if len(x) <= room]
    seed = how.seed_for(method.name, benchmark, number)
    groups = (
        conductor.engines.sample(
            [ids[i] for i in fits],
            repeats,
            how.temperature,
            how.max_new_tokens,
            how.top_p,
            seed=seed,
            shape=prompts.shape,
        )
        if fits
        else []
    )
    made: list[list[Sample]] = [
        [
            Sample(
                f"(no plan: the prompt is longer than {room} tokens, "
                f"generator.max_model_len - conductor.max_new_tokens)"
            )
        ]
        * repeats
        for _ in batch
    ]
    for i, group in zip(fits, groups):
        made[i] = [Sample(c.conductor.response_prefix + s.text) for s in group]
    return made
