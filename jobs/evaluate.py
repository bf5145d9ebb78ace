"""`conductor-rl evaluate`: methods x benchmarks with repeats, on the same pool and harness.

    conductor-rl evaluate                                        # evaluate.* of the configuration
    conductor-rl evaluate --method conductor:runs/local --method single:* --benchmark math500 --limit 20
    conductor-rl evaluate --config configs/paper.yaml evaluate.output_dir=runs/eval-paper --budget-usd 50
    conductor-rl evaluate --config configs/paper.yaml --workers qwen3-32b,gemma-3-27b-it   # open-weight only
    ray job submit --working-dir . -- python -m jobs.evaluate --config configs/paper.yaml

For each method and benchmark, questions go in batches: the method's plans (a
Conductor's, sampled by the vLLM generator pool; or a baseline's, built) run
on the worker pools (rate limits, cost ledger, response cache) and are graded
by the grader pool. Every finished batch is appended to records.jsonl, so a
stopped evaluation (Ctrl-C, `ray job stop`, a kill, `--budget-usd`) continues
where it stopped when run again with the same settings. At the end (and at a
stop) the table is written: results.json, results.md, records.parquet and
accuracy_vs_cost.png in evaluate.output_dir.

Before any actor starts: every method and benchmark name is checked, each
checkpoint is a model, no benchmark is empty, and no benchmark question is in
the training data of a method (a Conductor's, or the router's pilot).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from conductor_rl.config import Config, ConfigError, validate_config
from conductor_rl.data import Question, load_dataset
from conductor_rl.data.overlap import ContaminationError, check_disjoint
from conductor_rl.evaluation import (BaselineContext, EvalRecord, MethodError, MissingEvidenceError, Pool,
                                     RecordStore, ResumeMismatchError, Router, baseline_samples,
                                     conductor_lengths_of, parse_method, parse_methods, random_lengths_label, record_of,
                                     run_batch, single_verdicts_of, stopped_by_budget,
                                     strategy, summarise, write_results)
from conductor_rl.evaluation.methods import Method
from conductor_rl.evaluation.runner import Sample
from conductor_rl.grading.verdict import SCORED_VERDICTS
from conductor_rl.rollout.recursion import Recursion, generator_writer
from conductor_rl.rollout.workflow import StepLimits
from conductor_rl.run.placement import ClusterTooSmallError
from conductor_rl.workers.preflight import PreflightFailed
from conductor_rl.workers.providers import MissingApiKeyError, cached
from jobs.check import preflight
from jobs.common import (add_config_arguments, add_workers_argument, check_workers_before_start, config_from_args,
                         log)
from jobs.run_control import StopRun, StopSignal, check_budget

PILOT = "pilot"   # the benchmark name of the router's pilot records (left out of the table)


class EvaluationError(ValueError):
    """The evaluation cannot start as asked; the message names the value and what is allowed."""


# ---------------------------------------------------------------- checks before any actor

@dataclass
class Conducted:
    """A Conductor method: the configuration it plans with (a checkpoint's own) and its training data."""

    method: Method
    config: Config
    training: str | None
    prompts: Any = None   # its ConductorPrompt (the tokenizer loaded: the model is there)


@dataclass
class Evaluation:
    config: Config
    methods: list[Method]
    benchmarks: dict[str, list[Question]]
    conductors: dict[str, Conducted] = field(default_factory=dict)
    pilot: list[Question] = field(default_factory=list)   # the router's training questions


def prepare(config: Config) -> Evaluation:
    """Resolve and check everything that can be checked without a cluster."""
    e = config.evaluate
    names = [w.name for w in config.workers]
    try:
        methods = parse_methods(e.methods, names)
    except MethodError as err:
        raise EvaluationError(str(err)) from None
    if not methods:
        raise EvaluationError("evaluate.methods is empty: name at least one method, e.g. --method single:*")
    if any(m.kind == "oracle" for m in methods):   # the oracle picks from every worker's single runs
        have = {m.name for m in methods}
        methods += [parse_method(f"single:{n}", names) for n in names if f"single:{n}" not in have]
    methods.sort(key=lambda m: ("conductor", "single", "reflect", "moa", "router", "random", "oracle").index(m.kind))
    for name in (e.moa_aggregator, *(e.moa_proposers or [])):
        if name is not None and name not in names:
            raise EvaluationError(f"evaluate.moa_*: unknown worker {name!r}; workers are {names}")

    benchmarks: dict[str, list[Question]] = {}
    for spec in e.benchmarks:
        try:
            questions = load_dataset(spec, limit=e.limit)
        except (ValueError, FileNotFoundError, RuntimeError) as err:
            raise EvaluationError(f"benchmark {spec!r}: {' '.join(str(err).split())}") from None
        if not questions:
            raise EvaluationError(f"benchmark {spec!r} has no questions after filtering (evaluate.limit={e.limit}); "
                                  f"choose another window or split")
        benchmarks[spec] = questions
    if not benchmarks:
        raise EvaluationError("evaluate.benchmarks is empty: name at least one, e.g. --benchmark math500")

    ev = Evaluation(config, methods, benchmarks)
    for method in methods:
        if method.kind == "conductor":
            ev.conductors[method.name] = conductor_of(method, config)
    if any(m.kind == "router" for m in methods):
        spec = e.router_pilot and f"mixture:{e.router_pilot}" or config.data.questions
        limit = None if e.router_pilot else e.router_pilot_questions
        ev.pilot = load_dataset(spec, limit=limit)
    check_contamination(ev)
    check_workers_before_start(config)
    return ev


def conductor_of(method: Method, config: Config) -> Conducted:
    """A trained Conductor plans with the prompt it was trained with (its checkpoint's configuration)."""
    if method.checkpoint is None:
        untrained = config.model_copy(update={"conductor": with_depth(config.conductor, method)})
        return with_prompts(Conducted(method, untrained, None))
    model = method.checkpoint   # parse_method resolved it to the model folder
    state_file = model.parent / "state.json"
    trained = config
    training = None
    if state_file.is_file():
        saved = json.loads(state_file.read_text())["config"]
        trained = validate_config(saved)
        training = trained.data.questions
        pool = [w.name for w in trained.workers]
        subset = all(w.name in pool for w in config.workers)   # adaptive pools: any part of its pool
        if len(trained.workers) != len(config.workers) and not subset:
            raise EvaluationError(f"{method.name}: trained with {len(trained.workers)} workers ({pool}), evaluated "
                                  f"with {[w.name for w in config.workers]}; evaluate it on the pool it was "
                                  f"trained for, or on a subset of it (--workers)")
    conductor = trained.conductor.model_copy(update={"model": str(model)})
    return with_prompts(Conducted(method, config.model_copy(update={"conductor": with_depth(conductor, method)}),
                                  training))


def with_depth(conductor: Any, method: Method) -> Any:
    """`conductor:<...>@depth=N` evaluates the Conductor with recursion depth N."""
    return conductor if method.depth is None else conductor.model_copy(update={"max_depth": method.depth})


def with_prompts(conducted: Conducted) -> Conducted:
    """Load the Conductor's tokenizer now: a model that is not here fails before any actor starts."""
    from conductor_rl.plan.prompts import ConductorPrompt

    try:
        conducted.prompts = ConductorPrompt.from_config(conducted.config)
    except (OSError, ValueError) as err:
        raise EvaluationError(f"{conducted.method.name}: cannot load the Conductor "
                              f"{conducted.config.conductor.model!r} ({type(err).__name__}: "
                              f"{' '.join(str(err).split())[:300]}); name a model folder or an offline model") from None
    return conducted


def check_contamination(ev: Evaluation) -> None:
    """Refuse benchmarks whose questions a method was trained on."""
    sources = {c.training: name for name, c in ev.conductors.items() if c.training}
    trained: dict[str, list[Question]] = {}
    for spec, name in sources.items():
        trained[f"{spec} (training data of {name})"] = load_dataset(spec, limit=None)
    if ev.pilot:
        trained["the router's pilot"] = ev.pilot
    for what, training in trained.items():
        for spec, questions in ev.benchmarks.items():
            try:
                check_disjoint(training, questions, training_name=what, evaluation_name=spec)
            except ContaminationError as err:
                raise EvaluationError(str(err)) from None


def settings_of(ev: Evaluation) -> dict[str, Any]:
    """What must not change between a stopped evaluation and its resumption (methods and benchmarks may grow)."""
    c, e = ev.config, ev.config.evaluate
    return {"workers": [w.model_dump(mode="json") for w in c.workers], "repeats": e.repeats, "limit": e.limit,
            "temperature": e.temperature, "seed": c.conductor.seed, "batch_questions": e.batch_questions,
            "moa": [e.moa_layers, e.moa_proposers, e.moa_aggregator], "show_question": c.workflow.show_question}


# ---------------------------------------------------------------- the run

class Progress:
    """A tqdm bar over samples, with the accuracy so far and the money spent."""

    def __init__(self, total: int, enabled: bool) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, desc="evaluate", unit="sample", file=sys.stderr, disable=not enabled,
                        dynamic_ncols=True)
        self.correct = self.graded = 0

    def update(self, records: Sequence[EvalRecord], where: str, spent_usd: float) -> None:
        self.correct += sum(r.verdict == "correct" for r in records)
        self.graded += sum(r.verdict in (*SCORED_VERDICTS, "plan_error") for r in records)
        accuracy = self.correct / self.graded if self.graded else 0.0
        self.bar.set_postfix_str(f"{where} acc {accuracy:.3f} spent ${spent_usd:.4f}")
        self.bar.update(len(records))

    def close(self) -> None:
        self.bar.close()


class Runner:
    """The actors of an evaluation and the loop over methods, benchmarks and batches."""

    def __init__(self, ev: Evaluation, store: RecordStore, stop: StopSignal) -> None:
        from actors.grader import GraderPool
        from jobs.training_system import split_resources, start_worker_pools

        c = ev.config
        self.ev, self.store, self.stop = ev, store, stop
        budget = c.evaluate.budget_usd
        self.workers = start_worker_pools(c, budget, c.train.worker_replicas, graders=True)
        cpus, _, custom = split_resources(c.cluster.grader)
        self.graders = GraderPool(c.grader, num_cpus=cpus, resources=custom or None)
        self.graders.wait_ready()
        per_repeat = []
        for r in range(c.evaluate.repeats):
            if c.workflow.response_cache:   # each repeat its own namespace: a repeat is a fresh draw
                folder = str(Path(c.workflow.response_cache) / f"repeat-{r}")
                per_repeat.append([cached(p, w, folder) for p, w in zip(self.workers.pools, c.workers)])
            else:
                per_repeat.append(list(self.workers.pools))
        self.pool = Pool(per_repeat, [StepLimits.for_worker(w, c) for w in c.workers], [w.price for w in c.workers],
                         self.graders.grade_many, c.conductor.max_steps, c.evaluate.attempts)
        names = [w.name for w in c.workers]
        e = c.evaluate
        self.context = BaselineContext(
            names, [w.price for w in c.workers], c.conductor.max_steps, e.moa_layers,
            None if e.moa_proposers is None else [names.index(n) for n in e.moa_proposers],
            names.index(e.moa_aggregator) if e.moa_aggregator else 0, c.conductor.seed)
        self.progress: Progress | None = None

    def spent(self) -> float:
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
        generators = None
        if method.kind == "conductor" and any(self.remaining(method, b, qs) for b, qs in self.ev.benchmarks.items()):
            generators = self.start_conductor(method)
        # What the oracle and random plans take from the cells before them (methods run in that order).
        if method.kind == "oracle":
            self.context.single_verdicts = single_verdicts_of(self.store.records(), self.context.worker_names)
        if method.kind == "random":
            self.context.conductor_lengths = conductor_lengths_of(self.store.records())
        try:
            for benchmark, questions in self.ev.benchmarks.items():
                self.run_cell(method, benchmark, questions, self.ev.config.evaluate.repeats, generators)
        finally:
            if generators is not None:
                generators[0].shutdown()

    def run_cell(self, method: Method, benchmark: str, questions: Sequence[Question], repeats: int,
                 generators: Any = None) -> None:
        size = self.ev.config.evaluate.batch_questions
        for number, start in enumerate(range(0, len(questions), size)):
            batch = questions[start:start + size]   # fixed by position: a resumed batch samples what it did
            done = self.store.done()
            wanted = [[r for r in range(repeats) if (method.name, benchmark, q.id, r) not in done] for q in batch]
            if not any(wanted):
                continue
            self.check_budget()
            if generators is not None:
                made = self.conductor_samples(generators, method, benchmark, number, batch, repeats)
            else:
                made = baseline_samples(method, benchmark, batch, repeats, self.context)
            samples = [[made[i][r] for r in rs] for i, rs in enumerate(wanted)]
            recursion = None if generators is None else generators[3]
            rollouts = asyncio.run(run_batch(batch, samples, wanted, self.pool, recursion))
            records = [record_of(method.name, benchmark, r, self.pool.prices) for r in rollouts
                       if not stopped_by_budget(r)]
            self.store.append(records)
            if benchmark in self.ev.benchmarks:
                self.progress.update(records, f"{method.name} {benchmark}", self.spent())
            else:
                log(f"{benchmark}: {method.name} {start + len(batch)}/{len(questions)} questions")
        self.check_budget()

    # -- the Conductor's plans: sampled by the vLLM generator pool

    def start_conductor(self, method: Method) -> tuple[Any, Any, Config, Any]:
        import ray

        from actors.generator import GeneratorPool
        from jobs.training_system import generator_placement

        conducted = self.ev.conductors[method.name]
        c = conducted.config
        _, options = generator_placement(c, ray.cluster_resources().get("GPU", 0) > 0)
        log(f"{method.name}: starting the generator ({c.generator.backend}, {c.conductor.model}) ...")
        pool = GeneratorPool(c.conductor.model, c.generator, seed=c.conductor.seed, resources=options)
        return pool, conducted.prompts, c, self.recursion_of(method, pool, conducted.prompts, c)

    def recursion_of(self, method: Method, pool: Any, prompts: Any, c: Config) -> Recursion | None:
        """Recursive calls sample from the method's generator. At inference every plan below the
        maximum depth (`@depth=N`, else the checkpoint's conductor.max_depth) ends with one."""
        if c.conductor.max_depth < 1:
            return None
        temperature = c.conductor.temperature if self.ev.config.evaluate.temperature is None \
            else self.ev.config.evaluate.temperature
        writer = generator_writer(pool, temperature, c.conductor.max_new_tokens, c.conductor.top_p)
        return Recursion(writer, prompts, c.conductor.max_depth, c.conductor.max_steps,
                         forced_below=c.conductor.max_depth,
                         seed=stable_seed(c.conductor.seed, method.name))

    def conductor_samples(self, generators: tuple[Any, Any, Config, Any], method: Method, benchmark: str,
                          number: int, batch: Sequence[Question], repeats: int) -> list[list[Sample]]:
        pool, prompts, c, _ = generators
        temperature = c.conductor.temperature if self.ev.config.evaluate.temperature is None \
            else self.ev.config.evaluate.temperature
        room = c.generator.max_model_len - c.conductor.max_new_tokens
        ids = [prompts.ids(q.question) for q in batch]
        fits = [i for i, x in enumerate(ids) if len(x) <= room]
        seed = stable_seed(c.conductor.seed, method.name, benchmark, number)
        groups = pool.sample([ids[i] for i in fits], repeats, temperature, c.conductor.max_new_tokens,
                             c.conductor.top_p, seed=seed, shape=prompts.shape) if fits else []
        made: list[list[Sample]] = [[Sample(f"(no plan: the prompt is longer than {room} tokens, "
                                            f"generator.max_model_len - conductor.max_new_tokens)")] * repeats
                                    for _ in batch]
        for i, group in zip(fits, groups):
            made[i] = [Sample(c.conductor.response_prefix + s.text) for s in group]
        return made

    # -- the router: trained on every worker's verdicts over training questions

    def train_router(self) -> Router:
        ev, ctx = self.ev, self.context
        if ev.config.evaluate.router_pilot:
            from conductor_rl.data.mixture import load_pilot_verdicts

            verdicts = load_pilot_verdicts(ev.config.evaluate.router_pilot)
        else:
            log(f"router: pilot pass of every worker over {len(ev.pilot)} training questions "
                f"({ev.config.data.questions}) ...")
            for name in ctx.worker_names:
                self.run_cell(parse_method(f"single:{name}", ctx.worker_names), PILOT, ev.pilot, 1)
            verdicts = single_verdicts_of(self.store.records(), ctx.worker_names).get(PILOT, {})
        texts = {q.id: q.question for q in ev.pilot}
        ids = [q for q in verdicts if q in texts]
        return Router.fit([texts[q] for q in ids], [verdicts[q] for q in ids], ctx.worker_names, ctx.prices)


def pin_checkpoints(ev: Evaluation, out: Path) -> None:
    """A method name such as conductor:runs/local follows the run's newest checkpoint; its
    records must all come from one. conductors.json in `out` keeps the model each name meant."""
    file = out / "conductors.json"
    pinned = json.loads(file.read_text()) if file.is_file() else {}
    for name, conducted in ev.conductors.items():
        model = str(conducted.method.checkpoint) if conducted.method.checkpoint else conducted.config.conductor.model
        state = Path(model).parent / "state.json"
        if state.is_file():   # a run folder trained again holds a new model under the same path
            model += f" (saved at {json.loads(state.read_text()).get('saved_at')})"
        if pinned.setdefault(name, model) != model:
            raise EvaluationError(f"{name} now means {model}, but its records in {out} were made with "
                                  f"{pinned[name]}: name that checkpoint folder, or use another evaluate.output_dir")
    out.mkdir(parents=True, exist_ok=True)
    file.write_text(json.dumps(pinned, indent=2))


def run_evaluation(ev: Evaluation, out: Path) -> tuple[str, float, RecordStore]:
    """Run every cell of `ev` not yet in `out`'s records, on the cluster; returns how it
    ended ("finished", "budget" or a signal's name), the money the workers spent and the records."""
    from jobs.training_system import start_ray

    store = RecordStore(out)
    store.check_settings(settings_of(ev))
    start_ray(ev.config)
    stop = StopSignal()
    runner = None
    try:
        with stop.installed():
            runner = Runner(ev, store, stop)
            if ev.config.evaluate.preflight:
                preflight(ev.config, runner.workers.pools)
            try:
                runner.run()
                how = "finished"
            except StopRun as why:
                how = str(why)
        return how, runner.spent(), store
    finally:
        if runner is not None:
            runner.workers.shutdown()
            runner.graders.close()


def stable_seed(*parts: object) -> int:
    import hashlib

    return int.from_bytes(hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:4], "big") % (2**31)


def evaluate(config: Config) -> dict:
    """Run (or continue) the evaluation; returns the summary written to results.json."""
    ev = prepare(config)
    out = Path(config.evaluate.output_dir)
    pin_checkpoints(ev, out)
    started = time.perf_counter()
    how, spent, store = run_evaluation(ev, out)
    if how != "finished":
        log(f"stopped ({how}): what is done is kept in {out}/records.jsonl; run the same command again to "
            + ("continue with a larger --budget-usd" if how == "budget" else "continue"))
    names = {m.name for m in ev.methods}
    records = [r for r in store.records() if r.method in names and r.benchmark in ev.benchmarks]
    cells = summarise(records)
    info = {"stopped": how, "spent_usd": spent, "wall_s": time.perf_counter() - started,
            "methods": [m.name for m in ev.methods], "benchmarks": list(ev.benchmarks),
            "repeats": config.evaluate.repeats, "limit": config.evaluate.limit,
            "workers": [{"name": w.name, "provider": w.provider, "model": w.model} for w in config.workers],
            "simulated_workers": [w.name for w in config.workers if w.provider == "sim"],
            "random_lengths": random_lengths_label(conductor_lengths_of(records), config.conductor.max_steps)}
    write_results(out, cells, strategy(records), records, info)
    return {"output_dir": str(out), **info, "cells": [c.to_dict() for c in cells]}


# ---------------------------------------------------------------- command line

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("overrides_positional", nargs="*", metavar="KEY=VALUE", help="configuration overrides")
    parser.add_argument("--method", action="append", default=None, metavar="NAME",
                        help="a method (repeatable; replaces evaluate.methods): conductor:<checkpoint|run folder>, "
                        "conductor:untrained, single:<worker|*>, reflect:<worker|*>[:rounds], moa, router, random, oracle")
    parser.add_argument("--benchmark", action="append", default=None, metavar="SPEC",
                        help="a benchmark's dataset spec (repeatable; replaces evaluate.benchmarks)")
    parser.add_argument("--limit", type=int, default=None, help="questions per benchmark (evaluate.limit)")
    parser.add_argument("--repeats", type=int, default=None, help="samples per question (evaluate.repeats)")
    parser.add_argument("--budget-usd", type=float, default=None, help="stop cleanly at this spend (evaluate.budget_usd)")
    parser.add_argument("--output", default=None, help="output folder (evaluate.output_dir)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON on the last line")
    add_workers_argument(parser)
    add_config_arguments(parser)
    parser.add_argument("--no-check", dest="overrides", action="append_const", const="evaluate.preflight=false",
                        help="skip the preflight request to every worker (evaluate.preflight)")


def config_with_options(args: argparse.Namespace) -> Config:
    config, rest = config_from_args(args, positional="overrides_positional")
    if rest:
        raise SystemExit(f"error: not configuration overrides: {rest} (use key.sub=value)")
    update: dict[str, Any] = {}
    for option, key in (("method", "methods"), ("benchmark", "benchmarks"), ("limit", "limit"),
                        ("repeats", "repeats"), ("budget_usd", "budget_usd"), ("output", "output_dir")):
        value = getattr(args, option)
        if value is not None:
            update[key] = value
    try:
        evaluate_section = config.evaluate.model_validate({**config.evaluate.model_dump(), **update})
    except Exception as err:   # pydantic's error names the field
        raise SystemExit(f"error: evaluate: {' '.join(str(err).split())}") from None
    return config.model_copy(update={"evaluate": evaluate_section})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="conductor-rl evaluate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run(parser.parse_intermixed_args(argv))


def run(args: argparse.Namespace) -> int:
    config = config_with_options(args)
    try:
        summary = evaluate(config)
    except (EvaluationError, ConfigError, ResumeMismatchError, MissingApiKeyError, MissingEvidenceError,
            PreflightFailed, ClusterTooSmallError) as err:
        raise SystemExit(f"error: {err}") from None
    out = Path(summary["output_dir"])
    if args.json:
        print(json.dumps(summary))
    else:
        print((out / "results.md").read_text())
        print(f"written: {out}/results.json, results.md, records.parquet, accuracy_vs_cost.png")
    return 0 if summary["stopped"] == "finished" else 1


if __name__ == "__main__":
    sys.exit(main())
