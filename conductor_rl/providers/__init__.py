"""Worker providers behind one async interface (see `base`).

`build_provider` makes the provider a worker's configuration names. The HTTP
providers (OpenAI, Anthropic, Google GenAI, OpenAI-compatible servers) arrive
with the worker-pool work; until then they fail at start with a clear error.
"""

from __future__ import annotations

from conductor_rl.config import WorkerConfig
from conductor_rl.providers.base import (
    Provider,
    ProviderError,
    TaskHint,
    Usage,
    WorkerRequest,
    WorkerResponse,
)

__all__ = [
    "Provider", "ProviderError", "ProviderUnavailableError", "TaskHint", "Usage",
    "WorkerRequest", "WorkerResponse", "build_provider",
]

OFFLINE_PROVIDERS = ("sim", "local")


class ProviderUnavailableError(RuntimeError):
    """The configured provider cannot be built on this installation."""


def build_provider(config: WorkerConfig, seed: int = 0) -> Provider:
    if config.provider == "sim":
        from conductor_rl.providers.sim import SimProvider

        return SimProvider(config, seed=seed)
    if config.provider == "local":
        from conductor_rl.providers.local import LocalProvider

        return LocalProvider(config, seed=seed)
    raise ProviderUnavailableError(
        f"worker {config.name!r}: provider {config.provider!r} is not available in this version; "
        f"offline providers are {OFFLINE_PROVIDERS} (see configs/local.yaml)"
    )
