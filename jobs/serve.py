"""`conductor-rl serve`: a trained Conductor behind an OpenAI-compatible endpoint on Ray Serve.

    export CONDUCTOR_RL_SERVE_TOKENS=me:$(python -c 'import secrets; print(secrets.token_urlsafe(32))')
    conductor-rl serve conductor.model=runs/local/checkpoints/ckpt-000007/model
    conductor-rl serve --config configs/paper.yaml conductor.model=... serve.host=0.0.0.0 serve.replicas=4

It starts the generator engines with the Conductor's weights, the worker pools
(rate limiters and a ledger capped at serve.budget_usd), one actor with every
client's limits, and the Ray Serve application (actors/conductor_app.py), then
answers until Ctrl-C or SIGTERM. On a running cluster (cluster.address or
RAY_ADDRESS) it joins it; Ray Serve's own CLI runs the same application:

    serve run jobs.serve:app_builder config=configs/local.yaml conductor.model=...
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conductor_rl.config import Config, ConfigError, load_config
from conductor_rl.serving.access import BearerTokens, ClientBudget, ClientQuota, TokensError
from conductor_rl.workers.providers import MissingApiKeyError
from conductor_rl.workers.spend_journal import JOURNAL_FILE
from jobs.common import add_config_arguments, check_workers_before_start, config_from_args, log

if TYPE_CHECKING:
    from ray.serve import Application

    from actors.generator import GeneratorPool
    from actors.serving_generator import ServingGenerators
    from jobs.training_system import WorkerPools

APP_NAME = "conductor"
REPLICA_CPUS = 0.25  # a replica tokenizes and waits on the engines and the workers


def served_model_name(config: Config) -> str:
    """serve.model_name, else the Conductor's folder (a checkpoint's, for its model/ folder) or model name."""
    if config.serve.model_name:
        return config.serve.model_name
    path = Path(config.conductor.model)
    return path.parent.name if path.name == "model" and path.parent.name else path.name


@dataclass
class Served:
    """A running endpoint and what it started."""

    url: str
    model_name: str
    generators: GeneratorPool | ServingGenerators
    workers: WorkerPools

    stopped: bool = False

    def shutdown(self) -> None:
        """Stop the endpoint and what it started (a second call does nothing)."""
        from ray import serve

        if self.stopped:
            return
        self.stopped = True
        serve.delete(APP_NAME)
        self.workers.shutdown()
        self.generators.shutdown()


def load_tokens(config: Config) -> BearerTokens | None:
    """The clients' token digests (None: serve.require_token is off); raises TokensError."""
    return BearerTokens.load(config.serve.tokens_file) if config.serve.require_token else None


def continuous_batching(config: Config) -> bool:
    """Plans from vLLM's asynchronous engine (serve.batching=continuous), which the transformers backend lacks."""
    return config.serve.batching == "continuous" and config.generator.backend == "vllm"


def start_serving_generators(config: Config, model: str) -> GeneratorPool | ServingGenerators:
    """The Conductor's engines for serving: asynchronous vLLM engines (continuous batching), else the
    offline generator actors training uses (batches of serve.batch_window_s), placed alike."""
    import ray

    from actors.serving_generator import ServingGenerators
    from conductor_rl.run.demands import generator_placement
    from jobs.training_system import start_generators

    g = config.generator
    if not continuous_batching(config):
        return start_generators(config, model)
    _, options = generator_placement(config, ray.cluster_resources().get("GPU", 0) > 0)
    return ServingGenerators.start(model, g.engines, options, config.conductor.seed, g.max_model_len, g.dtype)


def deployment_options(config: Config) -> dict[str, Any]:
    """The endpoint deployment's Ray Serve options: serve.autoscaling as Ray Serve's autoscaling_config,
    as is, else serve.replicas fixed replicas; serve.max_ongoing_requests per replica."""
    s = config.serve
    scaling = {"autoscaling_config": s.autoscaling} if s.autoscaling else {"num_replicas": s.replicas}
    return {"max_ongoing_requests": s.max_ongoing_requests, "ray_actor_options": {"num_cpus": REPLICA_CPUS}, **scaling}


def build_application(
    config: Config, tokens: BearerTokens | None
) -> tuple[Application, GeneratorPool | ServingGenerators, WorkerPools]:
    """(the bound Serve application, the generator engines, the worker pools): every actor started."""
    from actors.conductor_app import ClientLimitsActor, ConductorServer
    from conductor_rl.models import resolve_model
    from jobs.training_system import start_worker_pools

    s = config.serve
    model = resolve_model(config.conductor.model)
    batching = "continuous" if continuous_batching(config) else "window"
    log(f"starting {config.generator.engines} generator engine(s) with {config.conductor.model} ({batching}) ...")
    generators = start_serving_generators(config, model)
    try:
        workers = start_worker_pools(
            config, s.budget_usd, s.worker_replicas, journal=Path(s.output_dir) / JOURNAL_FILE, job="serve"
        )
    except BaseException:
        generators.shutdown()
        raise
    limits = ClientLimitsActor.remote(
        ClientQuota(s.client_requests, s.client_usd, s.client_window_s),
        ClientBudget(s.client_budget_usd, s.client_budget_per) if s.client_budget_usd is not None else None,
        str(Path(s.output_dir) / JOURNAL_FILE),
        s.timeout_s,
    )
    deployment = ConductorServer.options(**deployment_options(config))
    application = deployment.bind(
        config,
        served_model_name(config),
        model,
        generators.actors,
        workers.pools,
        limits,
        tokens,
        workers.ledger,
        continuous=continuous_batching(config),
    )
    return application, generators, workers


class PortInUseError(RuntimeError):
    """serve.port is taken on serve.host."""


def check_port_free(host: str, port: int) -> None:
    """Fail before anything starts when the endpoint's port is taken (Ray Serve would fail later)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as err:
            raise PortInUseError(
                f"serve.port {port} on {host} is not free ({err.strerror}): choose another, e.g. serve.port={port + 1}"
            ) from None


def start_serving(config: Config) -> Served:
    """Start the endpoint at serve.host:serve.port (Ray started or joined here) and return once it answers.
    The tokens and the port are checked before anything starts (TokensError, PortInUseError)."""
    from ray import serve

    from jobs.ray_cluster import start_ray

    s = config.serve
    tokens = load_tokens(config)
    check_port_free(s.host, s.port)
    start_ray(config)
    application, generators, workers = build_application(config, tokens)
    try:
        serve.start(http_options={"host": s.host, "port": s.port})
        serve.run(application, name=APP_NAME, route_prefix="/")
    except BaseException as err:
        workers.shutdown()
        generators.shutdown()
        if "Failed to bind" in str(err):
            raise PortInUseError(
                f"serve.port {s.port} on {s.host} was taken while the endpoint started: choose another (serve.port=...)"
            ) from None
        raise
    return Served(f"http://{s.host}:{s.port}", served_model_name(config), generators, workers)


def app_builder(args: dict[str, str]) -> Application:
    """For `serve run jobs.serve:app_builder config=FILE key.sub=value ...` (Ray Serve's CLI)."""
    overrides = [f"{k}={v}" for k, v in args.items() if k != "config"]
    config = load_config(args.get("config"), overrides)
    application, _, _ = build_application(config, load_tokens(config))
    return application


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("overrides_positional", nargs="*", metavar="KEY=VALUE", help="configuration overrides")
    add_config_arguments(parser)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="conductor-rl serve", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(parser)
    args = parser.parse_intermixed_args(argv)
    config, rest = config_from_args(args, positional="overrides_positional")
    if rest:
        raise SystemExit(f"error: not configuration overrides: {rest}")
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        check_workers_before_start(config)
        served = start_serving(config)
    except (MissingApiKeyError, ConfigError, TokensError, PortInUseError) as err:
        raise SystemExit(f"error: {err}") from None
    log(
        f"serving {served.model_name!r} at {served.url}/v1 (OpenAI chat completions; GET / to watch it think); "
        f"Ctrl-C stops"
    )
    try:
        stop.wait()
    finally:
        log("stopping ...")
        served.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
