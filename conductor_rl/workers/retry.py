"""When to try a failed provider call again, and how long to wait first.

- 429: wait the provider's Retry-After when it gave one (the caller also puts
  the key into cooldown, so no other call hits the wall meanwhile), otherwise
  back off;
- 5xx, timeouts, dropped connections, malformed bodies (`retryable` errors):
  exponential backoff with full jitter, `uniform(0, min(cap, base * 2**n))`,
  which spreads the retries of many callers that failed together;
- anything else (400, 401, ...): fail at once with the provider's message;
- after `max_retries` retries the last error is raised, saying how many tries it took.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from conductor_rl.workers.providers.base import ProviderError

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 5
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    max_retry_after_s: float = 120.0  # a longer Retry-After is capped: we try again, the limiter cools down

    def delay(self, attempt: int, error: ProviderError, rng: random.Random) -> float:
        """Seconds to wait before retry number `attempt + 1` (attempt counts from 0)."""
        if error.retry_after_s is not None:
            return min(error.retry_after_s, self.max_retry_after_s)
        return rng.uniform(0.0, min(self.max_delay_s, self.base_delay_s * 2**attempt))


async def call_with_retries(
    attempt: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    on_retry: Callable[[ProviderError, float], Awaitable[None] | None] | None = None,
    rng: random.Random | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """Run `attempt` until it returns, a non-retryable ProviderError, or the retries run out.
    `on_retry(error, delay)` is told of each retry (metrics, cooldowns)."""
    rng = rng or random.Random()
    tries = 0
    while True:
        try:
            return await attempt()
        except ProviderError as err:
            if not err.retryable or tries >= policy.max_retries:
                if tries:
                    raise type(err)(
                        f"{err} (after {tries + 1} attempts)",
                        kind=err.kind,
                        retryable=err.retryable,
                        retry_after_s=err.retry_after_s,
                    ) from None
                raise
            delay = policy.delay(tries, err, rng)
            if on_retry is not None:
                maybe = on_retry(err, delay)
                if maybe is not None:
                    await maybe
            tries += 1
            await sleep(delay)
