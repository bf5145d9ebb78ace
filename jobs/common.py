"""What every command shares: `--config FILE` plus `key.sub=value` overrides,
and progress messages on stderr (stdout stays clean for --json)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from conductor_rl.config import Config, ConfigError, is_override, load_config
from conductor_rl.models import verbose
from conductor_rl.plan.roster import RosterError, parse_worker_names, with_workers
from conductor_rl.workers.providers.keys import check_api_keys


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=None, help="YAML configuration (default: the embedded configs/local.yaml)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a configuration override; bare key.sub=value arguments work too",
    )


def add_workers_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workers",
        default=None,
        metavar="NAME,NAME",
        help="offer the Conductor only these workers, each under its number in the whole pool "
        "(adaptive pools, paper §3.2; default: every configured worker)",
    )


def split_overrides(items: list[str]) -> tuple[list[str], list[str]]:
    """Separate `section.key=value` overrides from free positional text (see
    `conductor_rl.config.is_override`); an unknown section is refused by name later."""
    overrides, rest = [], []
    for item in items:
        (overrides if is_override(item) else rest).append(item)
    return overrides, rest


def config_from_args(args: argparse.Namespace, positional: str | None = None) -> tuple[Config, list[str]]:
    """Load the configuration; exit with the error naming the key if it is invalid. Every command
    starts here, so this also keeps third-party chatter out of its output (`quiet_third_party_output`)."""
    quiet_third_party_output()
    items = list(getattr(args, positional) or []) if positional else []
    overrides, rest = split_overrides(items)
    try:
        config = load_config(args.config, [*overrides, *args.overrides])
        if getattr(args, "workers", None) is not None:
            config = with_workers(config, parse_worker_names(args.workers))
    except (ConfigError, RosterError) as err:
        raise SystemExit(f"error: {err}") from None
    return config, rest


def check_workers_before_start(config: Config) -> None:
    """What can be known wrong about the workers without calling them: a missing key
    (MissingApiKeyError, naming the variable) or a setting their model refuses (ConfigError,
    naming the key). Commands call this before any actor starts."""
    from conductor_rl.workers.request_shape import shape_problems

    check_api_keys(config.workers)
    problems = [p for w in config.workers for p in shape_problems(w)]
    if problems:
        raise ConfigError("invalid worker settings:\n  " + "\n  ".join(problems))


def check_sandbox_before_start(config: Config, specs: Sequence[str]) -> None:
    """Where the questions of `specs` may hold code and `grader.sandbox.require_isolation` (the default)
    holds, refuse to start where bubblewrap cannot isolate code (a ConfigError naming the key and the
    fix), not at the first answer graded. Graders on other nodes check again where they run."""
    from conductor_rl.data.specs import may_hold_code

    if config.grader.sandbox.require_isolation and any(may_hold_code(s) for s in specs):
        from conductor_rl.grading.sandbox import IsolationUnavailableError, Sandbox

        try:
            _ = Sandbox.from_config(config.grader.sandbox).isolation
        except IsolationUnavailableError as err:
            raise ConfigError(str(err)) from None


def quiet_third_party_output() -> None:
    """A command prints its own progress and summary; the libraries' routine INFO lines stay out
    of it (warnings and errors do not), unless $CONDUCTOR_RL_VERBOSE is set. Model conversion and
    the policy actors keep quiet by `conductor_rl.models` (`_quiet_conversion`, `quiet_model_libraries`)."""
    if verbose():
        return
    # "Started a local Ray instance." / "Connected to Ray cluster.": the command says what it starts.
    # (ray.init resets the "ray" logger's level, not this child's.)
    logging.getLogger("ray._private.worker").setLevel(logging.WARNING)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
