"""An evaluation resolved and checked before any actor starts: every method and benchmark
name, each Conductor's settings (a checkpoint plans with the prompt it was trained with),
no empty benchmark, no benchmark question in a method's training data (a Conductor's, or
the router's pilot); what must not change between a stopped evaluation and its
resumption; and the checkpoint each Conductor method name meant."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conductor_rl.config import (
    ConductorConfig,
    Config,
    answering_workers,
    missing_seat,
    seat_of,
    validate_config,
)
from conductor_rl.config.redaction import redacted
from conductor_rl.data import Question, load_dataset
from conductor_rl.data.overlap import ContaminationError, check_disjoint

from .methods import Method, MethodError, parse_method, parse_methods
from .optimal import simulated_pool

# The order methods run in: the oracles after the single-worker runs they pick from.
KIND_ORDER = ("conductor", "single", "reflect", "moa", "router", "random", "oracle", "oracle-single", "optimal")


class EvaluationError(ValueError):
    """The evaluation cannot start as asked; the message names the value and what is allowed."""


@dataclass
class Conducted:
    """A Conductor method: the configuration it plans with (a checkpoint's own) and its training data."""

    method: Method
    config: Config
    training: str | None


@dataclass
class Evaluation:
    config: Config
    methods: list[Method]
    benchmarks: dict[str, list[Question]]
    conductors: dict[str, Conducted] = field(default_factory=dict)
    pilot: list[Question] = field(default_factory=list)  # the router's training questions


def prepare_evaluation(config: Config) -> Evaluation:
    """Resolve and check the methods, the benchmarks, each Conductor's settings and the training
    data against the benchmarks; raises EvaluationError."""
    e = config.evaluate
    names = [w.name for w in config.workers]
    answering = [config.workers[i] for i in answering_workers(config.workers)]  # no baseline calls the seat
    callable_names = [w.name for w in answering]
    try:
        methods = parse_methods(e.methods, names, every=callable_names)
    except MethodError as err:
        raise EvaluationError(str(err)) from None
    if not methods:
        raise EvaluationError("evaluate.methods is empty: name at least one method, e.g. --method single:*")
    seat = seat_of(config.workers)
    if seat is not None:  # the seat answers nothing by itself: it only calls the Conductor again
        calls_seat = [m.name for m in methods if m.worker is not None and names[m.worker] == seat]
        if seat == e.moa_aggregator or seat in (e.moa_proposers or []):
            calls_seat.append("evaluate.moa_*")
        if calls_seat:
            raise EvaluationError(
                f"{calls_seat[0]}: {seat!r} is the Conductor's own seat, not a worker that answers; baselines "
                f"call {', '.join(callable_names)}"
            )
    simulated = simulated_pool(answering)
    if any(m.kind == "optimal" for m in methods) and not simulated:
        real = [w.name for w in answering if w.provider != "sim"]
        raise EvaluationError(
            f"method 'optimal' needs a pool of simulated workers (provider: sim), whose best plan can be "
            f"computed; {', '.join(real)} {'is' if len(real) == 1 else 'are'} not simulated: drop optimal "
            "from evaluate.methods, or pick simulated workers with --workers"
        )
    # The oracle picks from every worker's single runs; so does oracle-single in a pool with a real worker.
    if any(m.kind == "oracle" or (m.kind == "oracle-single" and not simulated) for m in methods):
        have = {m.name for m in methods}
        methods += [parse_method(f"single:{n}", names) for n in callable_names if f"single:{n}" not in have]
    methods.sort(key=lambda m: KIND_ORDER.index(m.kind))
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
            raise EvaluationError(
                f"benchmark {spec!r} has no questions after filtering (evaluate.limit={e.limit}); "
                f"choose another window or split"
            )
        benchmarks[spec] = questions
    if not benchmarks:
        raise EvaluationError("evaluate.benchmarks is empty: name at least one, e.g. --benchmark math500")

    ev = Evaluation(config, methods, benchmarks)
    for method in methods:
        if method.kind == "conductor":
            ev.conductors[method.name] = conducted = conductor_of(method, config)
            check_seat(conducted)
    if any(m.kind == "router" for m in methods):
        spec = f"mixture:{e.router_pilot}" if e.router_pilot else config.data.questions
        limit = None if e.router_pilot else e.router_pilot_questions
        ev.pilot = load_dataset(spec, limit=limit)
    check_contamination(ev)
    return ev


def conductor_of(method: Method, config: Config) -> Conducted:
    """A trained Conductor plans with the prompt it was trained with (its checkpoint's configuration)."""
    if method.checkpoint is None:
        untrained = config.model_copy(update={"conductor": with_depth(config.conductor, method)})
        return Conducted(method, untrained, None)
    model = method.checkpoint  # parse_method resolved it to the model folder
    state_file = model.parent / "state.json"
    trained = config
    training = None
    if state_file.is_file():
        saved = json.loads(state_file.read_text())["config"]
        trained = validate_config(saved)
        training = trained.data.questions
        pool = [w.name for w in trained.workers]
        subset = all(w.name in pool for w in config.workers)  # adaptive pools: any part of its pool
        if len(trained.workers) != len(config.workers) and not subset:
            raise EvaluationError(
                f"{method.name}: trained with {len(trained.workers)} workers ({pool}), evaluated "
                f"with {[w.name for w in config.workers]}; evaluate it on the pool it was "
                f"trained for, or on a subset of it (--workers)"
            )
    conductor = trained.conductor.model_copy(update={"model": str(model)})
    return Conducted(method, config.model_copy(update={"conductor": with_depth(conductor, method)}), training)


def check_seat(conducted: Conducted) -> None:
    """A Conductor evaluated with a maximum depth >= 1 needs its seat in the pool: recursion is its
    own choice, a step given to the seat, so without one the depth would change nothing."""
    method = conducted.method
    name, _, _ = method.name.rpartition("@") if method.depth is not None else (method.name, "", "")
    key = f"{name}@depth" if method.depth is not None else f"{method.name}'s conductor.max_depth"
    problem = missing_seat(conducted.config.conductor.max_depth, conducted.config.workers, key)
    if problem:
        raise EvaluationError(problem)


def with_depth(conductor: ConductorConfig, method: Method) -> ConductorConfig:
    """`conductor:<...>@depth=N` evaluates the Conductor with recursion depth N."""
    return conductor if method.depth is None else conductor.model_copy(update={"max_depth": method.depth})


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
    # cost_weight only when set: a folder started before it existed (weight 0) still resumes.
    weighted = {"cost_weight": e.cost_weight} if e.cost_weight else {}
    return {
        **weighted,
        "workers": [redacted(w.model_dump(mode="json")) for w in c.workers],
        "repeats": e.repeats,
        "limit": e.limit,
        "temperature": e.temperature,
        "seed": c.conductor.seed,
        "batch_questions": e.batch_questions,
        "moa": [e.moa_layers, e.moa_proposers, e.moa_aggregator],
        "show_question": c.workflow.show_question,
    }


def pin_checkpoints(ev: Evaluation, out: Path) -> None:
    """A method name such as conductor:runs/local follows the run's newest checkpoint; its
    records must all come from one. conductors.json in `out` keeps the model each name meant."""
    file = out / "conductors.json"
    pinned = json.loads(file.read_text()) if file.is_file() else {}
    for name, conducted in ev.conductors.items():
        model = str(conducted.method.checkpoint) if conducted.method.checkpoint else conducted.config.conductor.model
        state = Path(model).parent / "state.json"
        if state.is_file():  # a run folder trained again holds a new model under the same path
            model += f" (saved at {json.loads(state.read_text()).get('saved_at')})"
        if pinned.setdefault(name, model) != model:
            raise EvaluationError(
                f"{name} now means {model}, but its records in {out} were made with "
                f"{pinned[name]}: name that checkpoint folder, or use another evaluate.output_dir"
            )
    out.mkdir(parents=True, exist_ok=True)
    file.write_text(json.dumps(pinned, indent=2))
