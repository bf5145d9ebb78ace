"""Cost of a call: token usage times the configured price (USD per million tokens)."""

from __future__ import annotations

from conductor_rl.config import Price
from conductor_rl.workers.providers.base import Usage


def cost_of(usage: Usage, price: Price) -> float:
    """Cached input tokens are billed at the cached rate; reasoning tokens are
    part of the output tokens (every provider we support counts them there)."""
    fresh_input = max(usage.input_tokens - usage.cached_tokens, 0)
    return (
        fresh_input * price.input + usage.cached_tokens * price.cached_input + usage.output_tokens * price.output
    ) / 1_000_000
