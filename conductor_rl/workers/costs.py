"""Cost of a call: token usage times the configured price (USD per million tokens)."""

from __future__ import annotations

from conductor_rl.config import Price
from conductor_rl.workers.limits import estimate_tokens
from conductor_rl.workers.providers.base import Usage, WorkerRequest


def cost_of(usage: Usage, price: Price) -> float:
    """Cached input tokens are billed at the cached rate; reasoning tokens are
    part of the output tokens (every provider we support counts them there)."""
    fresh_input = max(usage.input_tokens - usage.cached_tokens, 0)
    return (
        fresh_input * price.input + usage.cached_tokens * price.cached_input + usage.output_tokens * price.output
    ) / 1_000_000


def worst_case_cost(request: WorkerRequest, price: Price | None) -> float:
    """The most a call of `request` can be billed: its input (estimated) and every output token it may
    write. What a call is held at until its bill comes, and charged at when no bill will (cut off)."""
    if price is None:
        return 0.0
    return cost_of(Usage(input_tokens=estimate_tokens(request.messages, 0), output_tokens=request.max_tokens), price)
