"""What a provider is like under load, for the fake provider server (conductor_rl/testing/fake_llm_server.py):
each model's latency and the output tokens it bills drawn from heavy-tailed distributions, and 429s and
5xx at set rates. Seeded, so a benchmark's run is repeatable.

Both are lognormal: a `median` and `sigma` (the spread of its logarithm; 0: fixed). A reasoning model
answering in tens of seconds with a long tail is `Lognormal(20.0, 0.8)`: p90 about 56 s, p99 about 129 s.
The defaults a benchmark uses are its own assumptions and are documented there, not here.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import NormalDist


@dataclass(frozen=True)
class Lognormal:
    median: float
    sigma: float = 0.0

    def __post_init__(self) -> None:
        if self.median < 0 or self.sigma < 0:
            raise ValueError(f"a lognormal needs median >= 0 and sigma >= 0, got {self.median}, {self.sigma}")

    def draw(self, rng: random.Random) -> float:
        return self.median * math.exp(rng.gauss(0.0, self.sigma)) if self.sigma else self.median

    def quantile(self, q: float) -> float:
        """The value below which a share `q` of draws fall."""
        return self.median * math.exp(self.sigma * _normal_quantile(q))


@dataclass
class ProviderConditions:
    """Per model (keys: model ids, "*" for any other), the answer's latency in seconds (`latency`) and
    the output tokens it bills (`output_tokens`; none: the server's few); per request, a 429 (with
    Retry-After `retry_after_s`) with chance `rate_429` and a 500 with chance `rate_500`."""

    latency: Mapping[str, Lognormal] = field(default_factory=dict)
    output_tokens: Mapping[str, Lognormal] = field(default_factory=dict)
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

    def output_tokens_of(self, model: str) -> int | None:
        """Output tokens an answer of `model` bills (None: not set for it)."""
        tokens = self.output_tokens.get(model) or self.output_tokens.get("*")
        return max(1, round(tokens.draw(self._rng))) if tokens is not None else None

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
