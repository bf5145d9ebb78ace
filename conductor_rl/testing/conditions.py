"""What a provider is like under load, for the fake provider server (conductor_rl/testing/fake_llm_server.py):
each model's latency drawn from a heavy-tailed distribution, and 429s and 5xx at set rates. Seeded, so
a benchmark's run is repeatable.

Latency is lognormal: `median_s` and `sigma` (the spread of its logarithm; 0: fixed). A reasoning model
answering in tens of seconds with a long tail is `Latency(20.0, 0.8)`: p90 about 56 s, p99 about 129 s.
The defaults a benchmark uses are its own assumptions and are documented there, not here.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import NormalDist


@dataclass(frozen=True)
class Latency:
    median_s: float
    sigma: float = 0.0

    def __post_init__(self) -> None:
        if self.median_s < 0 or self.sigma < 0:
            raise ValueError(f"a latency needs median_s >= 0 and sigma >= 0, got {self.median_s}, {self.sigma}")

    def draw(self, rng: random.Random) -> float:
        return self.median_s * math.exp(rng.gauss(0.0, self.sigma)) if self.sigma else self.median_s

    def quantile(self, q: float) -> float:
        """The latency below which a share `q` of draws fall."""
        return self.median_s * math.exp(self.sigma * _normal_quantile(q))


@dataclass
class ProviderConditions:
    """Per model (`latency`, "*" for any other), the answer's latency; per request, a 429 (with
    Retry-After `retry_after_s`) with chance `rate_429` and a 500 with chance `rate_500`."""

    latency: Mapping[str, Latency] = field(default_factory=dict)
    rate_429: float = 0.0
    rate_500: float = 0.0
    retry_after_s: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not (self.rate_429 >= 0 and self.rate_500 >= 0 and self.rate_429 + self.rate_500 <= 1):
            raise ValueError(f"fault rates must be >= 0 and sum to at most 1, got {self.rate_429}, {self.rate_500}")
        self._rng = random.Random(self.seed)

    def latency_of(self, model: str) -> float:
        latency = self.latency.get(model) or self.latency.get("*")
        return latency.draw(self._rng) if latency is not None else 0.0

    def fault(self) -> str:
        """ "429:SECONDS", "500" or "ok" (the fake server's script entries) for the next request."""
        draw = self._rng.random()
        if draw < self.rate_429:
            return f"429:{self.retry_after_s}"
        if draw < self.rate_429 + self.rate_500:
            return "500"
        return "ok"


def _normal_quantile(q: float) -> float:
    if not 0 < q < 1:
        raise ValueError(f"q must be in (0, 1), got {q}")
    return NormalDist().inv_cdf(q)
