"""The `conductor-rl` command: one subcommand per job.

    conductor-rl train [--config FILE] [key.sub=value ...] [--resume] [--json]
    conductor-rl evaluate [--method M ...] [--benchmark B ...] [--limit N] [--budget-usd X] [key.sub=value ...]
    conductor-rl data mix [--config FILE] [key.sub=value ...]  # the training mixture, chosen by a pilot pass
    conductor-rl check [--config FILE] [key.sub=value ...] [--json]  # preflight: one request to every worker
    conductor-rl ask [QUESTION ...] [--config FILE] [key.sub=value ...] [--json]
    conductor-rl serve [--config FILE] [key.sub=value ...]      # an OpenAI-compatible endpoint on Ray Serve
    conductor-rl config [--config FILE] [key.sub=value ...]     # print the resolved configuration
    conductor-rl spend RUN_DIR [--by GROUP ...] [--csv FILE] [--parquet FILE] [--json]  # the spend journal

`conductor-rl --verbose COMMAND ...` (or CONDUCTOR_RL_VERBOSE=1) also shows what the libraries print
(Ray, vLLM, transformers: their INFO lines, progress bars and routine warnings), normally kept out.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import yaml

from conductor_rl.models import VERBOSE_ENV
from jobs import ask, check, data, evaluate, serve, spend, train
from jobs.common import add_config_arguments, config_from_args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--verbose"]:
        os.environ[VERBOSE_ENV] = "1"  # read here and by the actors of a local cluster, which inherit it
        argv = argv[1:]
    if argv[:1] == ["ask"]:
        return ask.main(argv[1:])  # its own parser, so overrides may follow options
    if argv[:1] == ["train"]:
        return train.main(argv[1:])
    if argv[:1] == ["evaluate"]:
        return evaluate.main(argv[1:])
    if argv[:1] == ["data"]:
        return data.main(argv[1:])
    if argv[:1] == ["check"]:
        return check.main(argv[1:])
    if argv[:1] == ["serve"]:
        return serve.main(argv[1:])
    if argv[:1] == ["spend"]:
        return spend.main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="conductor-rl", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--verbose", action="store_true", help=f"also show the libraries' own output (as {VERBOSE_ENV}=1 does)"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    train.add_arguments(commands.add_parser("train", help="train the Conductor with GRPO (the main job)"))
    ask.add_arguments(commands.add_parser("ask", help="ask the Conductor a question and run its plan"))
    evaluate.add_arguments(commands.add_parser("evaluate", help="methods x benchmarks: the paper's tables"))
    commands.add_parser("data", help="data tools: `data mix` builds the training mixture")
    commands.add_parser("check", help="preflight: one tiny request to every worker, and a table")
    commands.add_parser("serve", help="a trained Conductor behind an OpenAI-compatible endpoint (Ray Serve)")
    spend.add_arguments(commands.add_parser("spend", help="what a run's worker calls cost, from its spend journal"))
    show = commands.add_parser("config", help="print the resolved configuration as YAML")
    show.add_argument("overrides_positional", nargs="*", metavar="KEY=VALUE")
    add_config_arguments(show)
    args = parser.parse_args(argv)
    if args.command == "ask":
        return ask.run(args)
    if args.command == "config":
        config, rest = config_from_args(args, positional="overrides_positional")
        if rest:
            raise SystemExit(f"error: not configuration overrides: {rest}")
        print(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
        return 0
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
