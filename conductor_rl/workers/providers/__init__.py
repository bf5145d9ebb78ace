"""Worker providers behind one async interface (see `base`).

`build_provider` makes the provider a worker's configuration names: the offline
`sim` and `local` workers, and the HTTP providers on the official async SDKs
(OpenAI Chat Completions and Responses, Anthropic Messages, Google GenAI, and
OpenAI-compatible servers such as vLLM). An HTTP provider's key is read from the
environment variable in `api_key_env` at build time; a missing one raises
`MissingApiKeyError` naming the variable.
"""

from __future__ import annotations

from conductor_rl.config import HTTP_PROVIDERS, OFFLINE_PROVIDERS, WorkerConfig
from conductor_rl.workers.providers.base import (
    CallKey,
    MissingApiKeyError,
    Provider,
    ProviderError,
    ProviderUnavailableError,
    TaskHint,
    Usage,
    WorkerRequest,
    WorkerResponse,
)
from conductor_rl.workers.providers.keys import Secret

__all__ = [
    "HTTP_PROVIDERS",
    "OFFLINE_PROVIDERS",
    "CallKey",
    "MissingApiKeyError",
    "Provider",
    "ProviderError",
    "ProviderUnavailableError",
    "Secret",
    "TaskHint",
    "Usage",
    "WorkerRequest",
    "WorkerResponse",
    "build_provider",
    "cached",
]


def build_provider(config: WorkerConfig, seed: int = 0, api_key: Secret | None = None) -> Provider:
    """A provider for `config`. `api_key` overrides the environment (a driver hands
    its key to worker actors on nodes that lack the variable)."""
    if config.provider == "conductor":
        from conductor_rl.workers.providers.conductor import ConductorSeat

        return ConductorSeat(config.name)
    if config.provider == "sim":
        from conductor_rl.workers.providers.sim import SimProvider

        return SimProvider(config, seed=seed)
    if config.provider == "local":
        from conductor_rl.workers.providers.local import LocalProvider

        return LocalProvider(config, seed=seed)
    if config.provider in ("openai", "openai_compatible"):
        from conductor_rl.workers.providers.openai_chat import OpenAIChatProvider

        return OpenAIChatProvider(config, api_key)
    if config.provider == "openai_responses":
        from conductor_rl.workers.providers.openai_responses import OpenAIResponsesProvider

        return OpenAIResponsesProvider(config, api_key)
    if config.provider == "anthropic":
        from conductor_rl.workers.providers.anthropic_messages import AnthropicMessagesProvider

        return AnthropicMessagesProvider(config, api_key)
    if config.provider == "google":
        from conductor_rl.workers.providers.google_genai import GoogleGenAIProvider

        return GoogleGenAIProvider(config, api_key)
    raise ProviderUnavailableError(
        f"worker {config.name!r}: provider {config.provider!r} is not available in this version; "
        f"providers are {OFFLINE_PROVIDERS + HTTP_PROVIDERS}"
    )


def cached(provider: Provider, config: WorkerConfig, folder: str) -> Provider:
    """`provider` answering from an on-disk cache in `folder` when it can (the Conductor's
    own seat is never cached: its steps are recursive calls, sampled afresh)."""
    if config.provider == "conductor":
        return provider
    from conductor_rl.workers.response_cache import CachedProvider, ResponseCache

    identity: dict[str, object] = {
        "provider": config.provider,
        "model": config.model,
        "base_url": config.base_url,
        "worker": config.name,
    }
    # Only when set, so that entries made before these settings existed keep their keys.
    if config.extra_body:
        identity["extra_body"] = config.extra_body
    if config.fixed_temperature is not None:
        identity["fixed_temperature"] = config.fixed_temperature
    return CachedProvider(provider, ResponseCache(folder), identity)
