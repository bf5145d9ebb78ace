"""What one served request's worker calls cost, cut-off calls included.

A request that ends early (serve.timeout_s, or a client that hung up mid-stream) is
cancelled with its calls in flight. The provider may have billed them, and no bill
will come back, so the client is charged each one at its worst case, as the spend
journal counts it (conductor_rl/workers/guarded.py settles such a call as lost).
A call the provider refused is not billed and is not charged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conductor_rl.config import Price
from conductor_rl.workers.costs import worst_case_cost
from conductor_rl.workers.providers import Provider
from conductor_rl.workers.providers.base import ProviderError, WorkerRequest, WorkerResponse


class RequestMeter:
    """The cost of one request's calls: `billed` as their bills come, `cut_usd` for calls cut off."""

    def __init__(self) -> None:
        self.billed_usd = 0.0
        self._in_flight: dict[int, float] = {}  # each call's worst case, until its outcome

    @property
    def cut_usd(self) -> float:
        """Calls without an outcome (in flight, or cut off), at their worst case."""
        return sum(self._in_flight.values())

    @property
    def charged_usd(self) -> float:
        """What the client owes: every bill, and every call without one at its worst case."""
        return self.billed_usd + self.cut_usd

    def watch(self, workers: Sequence[Provider], prices: Sequence[Price | None]) -> list[Provider]:
        """`workers` as this request calls them, each call metered."""
        return [MeteredProvider(worker, price, self) for worker, price in zip(workers, prices, strict=True)]


class MeteredProvider:
    """A provider whose calls a `RequestMeter` counts; everything else is the provider's own."""

    def __init__(self, provider: Provider, price: Price | None, meter: RequestMeter) -> None:
        self._provider, self._price, self._meter = provider, price, meter

    def __getattr__(self, name: str) -> Any:
        return getattr(self._provider, name)

    async def complete(self, request: WorkerRequest) -> WorkerResponse:
        meter, call = self._meter, object()
        meter._in_flight[id(call)] = worst_case_cost(request, self._price)
        try:
            response = await self._provider.complete(request)
        except ProviderError:  # refused or failed at the provider: not billed
            del meter._in_flight[id(call)]
            raise
        # Anything else (a cancellation) leaves the call at its worst case.
        del meter._in_flight[id(call)]
        meter.billed_usd += response.cost_usd
        return response

    async def aclose(self) -> None:
        await self._provider.aclose()
