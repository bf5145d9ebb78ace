"""The one async interface every worker provider implements.

A request goes in (chat messages, sampling limits, an optional reasoning
budget); a response comes out (text, token usage, latency, cost). Providers
raise `ProviderError` for faults that are not the policy's fault (network,
rate limits, timeouts, server errors): the workflow engine records them as
infrastructure errors, never as wrong answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class TaskHint:
    """What a *simulated* worker needs to act out skill: the question's domain,
    reference answer and difficulty, the step's subtask and the answers it reads
    (conductor_rl/workers/sim_rules.py). Real providers never see or use it."""

    question_id: str
    domain: str
    reference: str
    answer_kind: str
    # Answers of the earlier steps this step may read (to model verification gains).
    visible_answers: tuple[str, ...] = ()
    # Distinguishes rollouts of the same question, so identical plans still vary.
    sample_key: str = ""
    # The question's text and the step's subtask: does the subtask carry the question's content, is it a check.
    question: str = ""
    subtask: str = ""
    # conductor_rl/data/difficulty.py: 0 the easiest, 1 the hardest.
    difficulty: float = 0.5


@dataclass(frozen=True)
class CallKey:
    """What a worker call is for, as the spend journal records it (never sent to a provider)."""

    question: str = ""
    rollout: str = ""  # the rollout's draw key (conductor_rl/rollout/rollouts.py)
    step: int = -1


@dataclass(frozen=True)
class WorkerRequest:
    messages: list[dict[str, str]]
    max_tokens: int
    temperature: float
    reasoning_budget: int | None = None
    hint: TaskHint | None = None
    # "default", "off", "minimal", "low", "medium", "high" (conductor_rl/workers/request_shape.py).
    reasoning: str = "default"
    key: CallKey | None = None


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cached_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class WorkerResponse:
    """`text` is the answer only; reasoning the provider returned apart (or inline in
    <think> tags) is in `reasoning`, counted in `usage` and cost, and not shown to
    later steps unless the worker's `reasoning_in_context` says so."""

    text: str
    usage: Usage = field(default_factory=Usage)
    latency_s: float = 0.0
    cost_usd: float = 0.0
    simulated: bool = False
    reasoning: str = ""
    # Why generation ended, in our words: "stop", "length" (the output budget ran out), "" (not reported).
    finish_reason: str = ""

    @property
    def empty_after_length(self) -> bool:
        """The budget ran out before any answer: the model spent it thinking."""
        return self.finish_reason == "length" and not self.text.strip()


class ProviderError(RuntimeError):
    """A provider call failed for a reason outside the policy's control.

    `kind` names the failure (`rate_limited`, `server_error`, `timeout`,
    `connection`, `malformed_response`, `bad_request`, `auth`, ...);
    `retryable` says whether the same request may succeed later;
    `retry_after_s` is the provider's own wait (Retry-After), when it gave one."""

    def __init__(
        self, message: str, *, kind: str = "provider", retryable: bool = False, retry_after_s: float | None = None
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.retryable = retryable
        self.retry_after_s = retry_after_s

    def __reduce__(self):  # keyword-only fields survive pickling (Ray ships errors between processes)
        return (_rebuild_provider_error, (type(self), str(self), self.kind, self.retryable, self.retry_after_s))


def _rebuild_provider_error(cls: type, message: str, kind: str, retryable: bool, retry_after_s: float | None):
    return cls(message, kind=kind, retryable=retryable, retry_after_s=retry_after_s)


class ProviderUnavailableError(RuntimeError):
    """The configured provider cannot be built on this installation or environment."""


class MissingApiKeyError(ProviderUnavailableError):
    """The environment variable a worker's key is read from is unset or empty."""


@runtime_checkable
class Provider(Protocol):
    """A worker backend. `name` is the configured worker name (never a key)."""

    name: str
    simulated: bool

    async def complete(self, request: WorkerRequest) -> WorkerResponse: ...

    async def aclose(self) -> None: ...
