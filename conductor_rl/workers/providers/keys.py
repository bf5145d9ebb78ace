"""API keys: read from the environment variable a worker names, carried in a
`Secret` whose repr and str never show the value (it still pickles, so a
driver can hand it to the worker actors of a cluster whose nodes lack the variable).

A missing key fails at start (`MissingApiKeyError`) naming the variable, so a
training run does not discover it hundreds of calls in.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable

from conductor_rl.config import OFFLINE_PROVIDERS, WorkerConfig
from conductor_rl.workers.providers.base import MissingApiKeyError


class Secret:
    """A string that does not print. `reveal()` is the one way to read it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def fingerprint(self) -> str:
        """A short one-way digest: tells keys apart (limiter names) without exposing them."""
        return hashlib.sha256(b"conductor-rl:" + self._value.encode()).hexdigest()[:12]

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


# Local OpenAI-compatible servers (vLLM, SGLang, Ollama) accept any key; the SDK needs a non-empty one.
NO_KEY = Secret("not-needed")


def read_api_key(config: WorkerConfig, environ: dict[str, str] | None = None) -> Secret:
    """The key for `config`, from the variable named by `api_key_env`. A worker
    without `api_key_env` (a local vLLM server) gets a placeholder."""
    env = os.environ if environ is None else environ
    if not config.api_key_env:
        if config.provider == "openai_compatible":
            return NO_KEY
        raise MissingApiKeyError(
            f"worker {config.name!r} (provider {config.provider!r}) has no api_key_env: "
            f"set workers.<i>.api_key_env to the name of the environment variable that holds its key"
        )
    value = env.get(config.api_key_env, "").strip()
    if not value:
        raise MissingApiKeyError(
            f"worker {config.name!r}: environment variable {config.api_key_env} is not set; "
            f"export {config.api_key_env}=<your key> before starting (or on every node of the cluster)"
        )
    return Secret(value)


def check_api_keys(workers: Iterable[WorkerConfig]) -> None:
    """Every worker that calls an API has its key in the environment; raises
    MissingApiKeyError naming the first variable missing (commands call this before any actor starts)."""
    for worker in workers:
        if worker.provider not in OFFLINE_PROVIDERS:
            read_api_key(worker)
