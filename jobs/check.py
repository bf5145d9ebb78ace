"""`conductor-rl check`: one tiny request per worker through the pool, before money is spent.

    conductor-rl check --config configs/paper.yaml          # the table; exit 1 if a worker fails
    conductor-rl check --config configs/paper.yaml --json   # the checks as JSON on the last line
    ray job submit --working-dir . -- python -m jobs.check --config configs/paper.yaml

Each worker gets the probe with its own settings, through the same worker pool
training uses (its rate limiter, retries, ledger; served workers are started
first), so what fails here would fail in iteration 0. `train` and `evaluate`
run the same check before their first iteration (`train.preflight`,
`evaluate.preflight`; `--no-check` skips it) and stop with the table when a
worker fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence

from conductor_rl.config import Config, ConfigError
from conductor_rl.run.placement import ClusterTooSmallError
from conductor_rl.workers.forecast import Forecast
from conductor_rl.workers.preflight import PreflightFailed, WorkerCheck, check_workers, format_checks
from conductor_rl.workers.providers import MissingApiKeyError, Provider
from jobs.common import add_config_arguments, check_workers_before_start, config_from_args, log


def worker_notes(config: Config) -> list[list[str]]:
    """How each worker's requests are shaped (e.g. a temperature its model does not take)."""
    from conductor_rl.workers.request_shape import shape_notes

    return [list(shape_notes(w)) for w in config.workers]


def preflight(config: Config, pools: Sequence[Provider], timeout_s: float = 120.0) -> list[WorkerCheck]:
    """Probe every worker; log the table; raise PreflightFailed (the table) if one failed."""
    started = time.perf_counter()
    log(f"preflight: one request to each of {len(pools)} worker(s) ...")
    checks = asyncio.run(check_workers(pools, config.workers, timeout_s, worker_notes(config)))
    table = format_checks(checks, time.perf_counter() - started)
    log(table)
    if any(c.failed for c in checks):
        raise PreflightFailed(f"a worker failed its preflight check (skip it with --no-check):\n{table}")
    return checks


def check(config: Config) -> tuple[list[WorkerCheck], float]:
    """Start the cluster's worker pools, probe them, stop them; (checks, seconds)."""
    from jobs.ray_cluster import start_ray
    from jobs.training_system import start_worker_pools

    check_workers_before_start(config)
    start_ray(config)
    started = time.perf_counter()
    pools = start_worker_pools(config, budget_usd=None, replicas=1)
    try:
        checks = asyncio.run(check_workers(pools.pools, config.workers, notes=worker_notes(config)))
    finally:
        pools.shutdown()
    return checks, time.perf_counter() - started


def training_forecast_of(config: Config) -> Forecast | None:
    """What a training run of `config` would cost (None, said why, when its questions cannot be read)."""
    from conductor_rl.system import System
    from conductor_rl.workers.forecast import training_forecast
    from conductor_rl.workers.spend_journal import Books

    try:
        questions, _ = System(config).training_questions()
    except (OSError, ValueError, RuntimeError) as err:
        log(f"no cost forecast: the training questions cannot be read ({err})")
        return None
    return training_forecast(config, questions, Books(), 0)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("overrides_positional", nargs="*", metavar="KEY=VALUE", help="configuration overrides")
    parser.add_argument("--json", action="store_true", help="print the checks as JSON on the last line")
    add_config_arguments(parser)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="conductor-rl check", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(parser)
    return run(parser.parse_intermixed_args(argv))


def run(args: argparse.Namespace) -> int:
    config, rest = config_from_args(args, positional="overrides_positional")
    if rest:
        raise SystemExit(f"error: not configuration overrides: {rest} (use key.sub=value)")
    try:
        checks, seconds = check(config)
    except (ConfigError, MissingApiKeyError, ClusterTooSmallError) as err:
        raise SystemExit(f"error: {err}") from None
    print(format_checks(checks, seconds))
    forecast = training_forecast_of(config)
    if forecast is not None:
        print(forecast.describe(f"training ({config.train.iterations} iterations)"))
    if args.json:
        print(
            json.dumps(
                {
                    "wall_s": seconds,
                    "failed": [c.worker for c in checks if c.failed],
                    "checks": [c.to_dict() for c in checks],
                    "forecast": forecast.as_dict() if forecast is not None else None,
                }
            )
        )
    return 1 if any(c.failed for c in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
