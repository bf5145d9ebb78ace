"""`conductor-rl data mix`: the paper's training mixture, chosen by a pilot pass.

    conductor-rl data mix                                   # mix.* of the embedded configuration
    conductor-rl data mix --config configs/paper.yaml       # the paper's 960 over MATH, MMLU, RLPR, LiveCodeBench v1
    ray job submit --working-dir . -- python -m jobs.data mix --config configs/paper.yaml

Candidates are drawn (seeded) from each of `mix.sources`; a source that is not
available offline is skipped and named. Every worker answers every candidate
once, through the worker pools (rate limits, ledger, response cache) and the
grader pool, exactly as `conductor-rl evaluate`'s single:<worker> method; those
runs are kept next to the output (`<output>.pilot/`), so a stopped pass
continues where it stopped. The selection rule is conductor_rl/data/mixture.py's;
the output is one Parquet file holding the questions and each worker's verdict.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Sequence
from pathlib import Path

from conductor_rl.config import Config, ConfigError, answering_workers
from conductor_rl.data import Question, load_available, load_first
from conductor_rl.data.mixture import mixture_report, select_mixture, write_mixture
from conductor_rl.data.overlap import text_key
from conductor_rl.evaluation import ResumeMismatchError, parse_method, single_verdicts_of
from conductor_rl.evaluation.prepare import Evaluation, EvaluationError
from jobs.common import add_config_arguments, config_from_args, log
from jobs.evaluate import run_evaluation


def candidates(config: Config, fallbacks: dict[str, str] | None = None) -> dict[str, list[Question]]:
    """A seeded draw of `mix.candidates_per_source` from each source that loads, minus evaluation questions.
    A source "a|b" is a and, where a is not here, its fallback b: `fallbacks` records each one used."""
    m = config.mix
    # A training mixture never holds an evaluation question (a benchmark that is not here cannot leak).
    held_out = {text_key(q.question) for qs in load_available(config.evaluate.benchmarks).values() for q in qs}
    pools: dict[str, list[Question]] = {}
    for wanted in m.sources:
        try:
            spec, questions = load_first(wanted)
        except (FileNotFoundError, RuntimeError, ValueError) as err:
            log(f"mix: skipping source {wanted!r}: {' '.join(str(err).split())[:300]}")
            continue
        first = wanted.split("|")[0].strip()
        if spec != first:
            log(f"mix: {first} is not available here: using its offline fallback {spec}")
            if fallbacks is not None:
                fallbacks[wanted] = spec
        kept = [q for q in questions if text_key(q.question) not in held_out]
        if len(kept) < len(questions):
            log(f"mix: {spec}: left out {len(questions) - len(kept)} questions that evaluation benchmarks contain")
        rng = random.Random(f"{m.seed}/{spec}")
        pools[spec] = sorted(rng.sample(kept, min(m.candidates_per_source, len(kept))), key=lambda q: q.id)
    if not pools:
        raise EvaluationError(
            f"mix.sources: none of {m.sources} is available here; name sources that load "
            f"(see conductor_rl.data.DATASET_SPEC_FORMS)"
        )
    return pools


def mix(config: Config) -> dict:
    fallbacks: dict[str, str] = {}
    pools = candidates(config, fallbacks)
    # Every worker that answers (the Conductor's own seat answers nothing: configs/paper-recursion.yaml has one).
    names = [config.workers[i].name for i in answering_workers(config.workers)]
    output = Path(config.mix.output)
    pilot_dir = output.with_name(output.name + ".pilot")
    pilot_config = config.model_copy(
        update={
            "evaluate": config.evaluate.model_copy(update={"repeats": 1, "output_dir": str(pilot_dir), "limit": None})
        }
    )
    pool = [w.name for w in config.workers]  # a method names its worker by its place in the pool
    ev = Evaluation(pilot_config, [parse_method(f"single:{n}", pool) for n in names], pools)
    log(
        f"mix: pilot pass of {len(names)} workers over {sum(map(len, pools.values()))} candidates "
        f"from {list(pools)} ..."
    )
    how, _, store = run_evaluation(ev, pilot_dir)
    if how != "finished":
        raise SystemExit(
            f"mix: stopped ({how}) during the pilot pass; its runs are kept in {pilot_dir}: "
            f"run the same command again to continue"
        )
    verdicts: dict[str, dict[str, bool]] = {}
    for per_question in single_verdicts_of(store.records(), names).values():
        for qid, by_worker in per_question.items():
            verdicts[qid] = {w: share >= 0.5 for w, share in by_worker.items()}
    everything = [q for qs in pools.values() for q in qs]
    chosen = select_mixture(everything, verdicts, total=config.mix.total, seed=config.mix.seed)
    info = {
        "sources": list(pools),
        "skipped_sources": [s for s in config.mix.sources if not any(a.strip() in pools for a in s.split("|"))],
        # A source "a|b" drawn from its fallback b: named, since it is not the source the config asked for.
        "fallback_sources": fallbacks,
        "candidates": {s: len(qs) for s, qs in pools.items()},
        "workers": names,
        "simulated_workers": [w.name for w in config.workers if w.provider == "sim"],
    }
    write_mixture(output, chosen, verdicts, names, info)
    report = mixture_report(chosen, verdicts, names)
    log(f"mix: wrote {len(chosen)} problems to {output}")
    return {"output": str(output), **info, "report": report}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="conductor-rl data", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    tools = parser.add_subparsers(dest="tool", required=True)
    mixer = tools.add_parser("mix", help="build the training mixture (mix.*) from a pilot pass")
    mixer.add_argument("overrides_positional", nargs="*", metavar="KEY=VALUE", help="configuration overrides")
    mixer.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_config_arguments(mixer)
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] != ["mix"]:
        parser.parse_args(argv)  # no tool, an unknown one, or --help: argparse says so and exits
        raise SystemExit(f"error: unknown data tool {argv[:1]}; the tools are: mix")
    # The tool's own parser: argparse refuses parse_intermixed_args on a parser with subcommands,
    # and overrides may come after options (`data mix --json mix.total=20`).
    args = mixer.parse_intermixed_args(argv[1:])
    config, rest = config_from_args(args, positional="overrides_positional")
    if rest:
        raise SystemExit(f"error: not configuration overrides: {rest} (use key.sub=value)")
    try:
        summary = mix(config)
    except (EvaluationError, ConfigError, ResumeMismatchError) as err:
        raise SystemExit(f"error: {err}") from None
    print(json.dumps(summary) if args.json else json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
